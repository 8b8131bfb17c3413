"""Session fixtures for the engine tests: the real SmolLM2 model, loaded once per dtype."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from engine.attention import AttentionMetadata
from engine.model import LlamaModel
from engine.model_config import ModelConfig
from engine.tokenizer import Tokenizer
from engine.weights import default_model_path, load_model

BLOCK = 16


class LoadedModel(NamedTuple):
    model: LlamaModel
    tokenizer: Tokenizer
    config: ModelConfig


@pytest.fixture(scope="session")
def smollm_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def smollm_fp32(smollm_path: str) -> LoadedModel:
    """SmolLM2-135M-Instruct (GGUF) in float32 on the CPU."""
    return LoadedModel(*load_model(smollm_path, dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def smollm_bf16(smollm_path: str) -> LoadedModel:
    """SmolLM2-135M-Instruct (GGUF) in bfloat16 on the CPU."""
    return LoadedModel(*load_model(smollm_path, dtype=torch.bfloat16, device="cpu"))


@pytest.fixture(scope="session")
def smollm_tokenizer(smollm_fp32: LoadedModel) -> Tokenizer:
    return smollm_fp32.tokenizer


class PagedSequences:
    """A KV cache plus a block table per sequence, with blocks handed out out of order."""

    def __init__(self, model: LlamaModel, num_blocks: int = 64) -> None:
        c = model.config
        self.model = model
        self.kv = torch.zeros(c.num_layers, 2, num_blocks, BLOCK, c.num_kv_heads, c.head_dim,
                              dtype=model.dtype)
        self.free = list(range(num_blocks - 1, 0, -1))  # block 0 stays unused (padding)
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def step(self, new_tokens: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Run one step where sequence s appends new_tokens[s]; returns logits per sequence."""
        ids, positions, slots, starts, ctx_lens, tables = [], [], [], [0], [], []
        for seq, toks in new_tokens.items():
            start = self.lens.get(seq, 0)
            table = self.tables.setdefault(seq, [])
            while len(table) * BLOCK < start + len(toks):
                table.append(self.free.pop())
            for pos in range(start, start + len(toks)):
                slots.append(table[pos // BLOCK] * BLOCK + pos % BLOCK)
            ids += toks
            positions += range(start, start + len(toks))
            starts.append(len(ids))
            self.lens[seq] = start + len(toks)
            ctx_lens.append(self.lens[seq])
            tables.append(table)
        width = max(len(t) for t in tables)
        block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables])
        meta = AttentionMetadata(torch.tensor(slots), starts, ctx_lens, block_tables)
        with torch.inference_mode():
            hidden = self.model(torch.tensor(ids), torch.tensor(positions), meta, self.kv)
            logits = self.model.compute_logits(hidden)
        return {seq: logits[starts[i]:starts[i + 1]] for i, seq in enumerate(new_tokens)}


def prompt_logits(model: LlamaModel, ids: list[int], split: int | None = None) -> torch.Tensor:
    """Logits of every prompt position, in one pass or two chunks cut at `split`."""
    seqs = PagedSequences(model)
    if split is None:
        return seqs.step({0: ids})[0]
    return torch.cat([seqs.step({0: ids[:split]})[0], seqs.step({0: ids[split:]})[0]])
