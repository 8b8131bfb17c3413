"""Per-token log-probabilities from the bundled model, for LLMLingua-style prompt pruning.

It satisfies `prompts.interfaces.TokenScorer` structurally (the engine imports nothing of
`prompts/`). It holds its own copy of the weights and a private KV cache, and runs on a
worker thread, so scoring never competes with the engine's scheduler for blocks. Given the
engine's step-thread executor, it runs between engine steps instead of against them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor

import torch

from engine.attention import AttentionMetadata
from engine.weights import load_model


class EngineModelScorer:
    """A `TokenScorer` on the bundled engine's model (its own copy, loaded on first use, run
    off the event loop with a private KV cache so it never competes with the engine's blocks).

    A text is scored in chunks of `chunk` tokens, each one call on the executor: on the
    engine's step thread that is one short turn between engine steps, not one long stall."""

    def __init__(self, path: str | None = None, window: int = 1024, block_size: int = 16,
                 executor: Executor | None = None, chunk: int = 256,
                 dtype: str = "auto") -> None:
        self.executor = executor  # None: asyncio's default thread pool
        self.model, self.tokenizer, config = load_model(path, dtype)
        self.block_size, self.window, self.chunk = block_size, window, chunk
        blocks = -(-window // block_size)
        self.kv_cache = torch.zeros(config.num_layers, 2, blocks, block_size,
                                    config.num_kv_heads, config.head_dim,
                                    dtype=self.model.dtype, device=self.model.device)
        self._busy = asyncio.Lock()  # one text at a time owns the private KV cache

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    async def token_logprobs(self, ids: Sequence[int]) -> list[float]:
        """log p(token i | tokens before it) for the first `window` ids (0.0 for the first)."""
        ids = list(ids)[: self.window]
        loop = asyncio.get_running_loop()
        async with self._busy:
            scores = [0.0] if ids else []
            for start in range(0, len(ids), self.chunk):
                scores += await loop.run_in_executor(self.executor, self._chunk_logprobs, ids,
                                                     start, min(start + self.chunk, len(ids)))
            return scores

    @torch.inference_mode()
    def _chunk_logprobs(self, ids: list[int], start: int, end: int) -> list[float]:
        """Run tokens [start, end) over the cached [0, start); score tokens start+1 .. end."""
        device = self.model.device
        blocks = torch.arange(-(-end // self.block_size), device=device).unsqueeze(0)
        positions = torch.arange(start, end, device=device)
        meta = AttentionMetadata(slot_mapping=positions, query_start_loc=[0, end - start],
                                 context_lens=[end], block_tables=blocks)
        hidden = self.model(torch.tensor(ids[start:end], device=device), positions, meta,
                            self.kv_cache)
        targets = ids[start + 1:end + 1]
        logprobs = torch.log_softmax(self.model.compute_logits(hidden[:len(targets)]), dim=-1)
        picked = logprobs.gather(1, torch.tensor(targets, device=device).unsqueeze(1))
        return picked.squeeze(1).tolist()
