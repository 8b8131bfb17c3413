"""Per-token log-probabilities from the bundled model, for LLMLingua-style prompt pruning.

It satisfies `prompts.interfaces.TokenScorer` structurally (the engine imports nothing of
`prompts/`). It holds its own copy of the weights and a private KV cache, and runs on a
worker thread, so scoring never competes with the engine's scheduler for blocks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import torch

from engine.attention import AttentionMetadata
from engine.weights import load_model


class EngineModelScorer:
    """A `TokenScorer` on the bundled engine's model (its own copy, loaded on first use, run
    on a worker thread with a private KV cache so it never competes with the engine's)."""

    def __init__(self, path: str | None = None, window: int = 1024, block_size: int = 16) -> None:
        self.model, self.tokenizer, config = load_model(path)
        self.block_size, self.window = block_size, window
        blocks = -(-window // block_size)
        self.kv_cache = torch.zeros(config.num_layers, 2, blocks, block_size,
                                    config.num_kv_heads, config.head_dim,
                                    dtype=self.model.dtype, device=self.model.device)
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    async def token_logprobs(self, ids: Sequence[int]) -> list[float]:
        return await asyncio.to_thread(self._logprobs, list(ids)[: self.window])

    @torch.inference_mode()
    def _logprobs(self, ids: list[int]) -> list[float]:
        n, device = len(ids), self.model.device
        blocks = torch.arange(-(-n // self.block_size), device=device).unsqueeze(0)
        meta = AttentionMetadata(slot_mapping=torch.arange(n, device=device),
                                 query_start_loc=[0, n], context_lens=[n], block_tables=blocks)
        with self._lock:
            hidden = self.model(torch.tensor(ids, device=device), torch.arange(n, device=device),
                                meta, self.kv_cache)
            logprobs = torch.log_softmax(self.model.compute_logits(hidden[:-1]), dim=-1)
        picked = logprobs.gather(1, torch.tensor(ids[1:], device=device).unsqueeze(1))
        return [0.0] + picked.squeeze(1).tolist()
