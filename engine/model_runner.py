"""Runs one scheduled step on the model: builds the flat batch, owns the KV cache, samples.

The batch is every scheduled sequence's new tokens laid end to end (no padding). Logits
are computed only for the last token of sequences that sample this step; a prefill chunk
that does not finish its prompt just writes K/V. Device-agnostic: cpu here, cuda as is.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.attention import AttentionMetadata
from engine.config import BYTES_PER_MB, EngineConfig
from engine.grammar import apply_grammar_masks
from engine.model import LlamaModel, StepCut
from engine.model_config import ModelConfig
from engine.sampler import Sampler
from engine.sequence import ScheduledSequence


def kv_bytes_per_block(model_config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    c = model_config
    per_token = c.num_layers * 2 * c.num_kv_heads * c.head_dim * dtype.itemsize
    return per_token * block_size


class ModelRunner:
    """Owns `kv_cache [layers, 2, blocks, block_size, kv_heads, head_dim]` and the sampler."""

    def __init__(self, model: LlamaModel, model_config: ModelConfig, config: EngineConfig) -> None:
        self.model = model
        self.model_config = model_config
        self.block_size = config.block_size
        self.device = model.device
        self.num_blocks = config.num_kv_blocks or max(
            1, config.kv_cache_memory_mb * BYTES_PER_MB
            // kv_bytes_per_block(model_config, config.block_size, model.dtype))
        c = model_config
        self.kv_cache = torch.zeros(c.num_layers, 2, self.num_blocks, self.block_size,
                                    c.num_kv_heads, c.head_dim, dtype=model.dtype,
                                    device=self.device)
        self.sampler = Sampler(self.device, config.seed)

    @torch.inference_mode()
    def run(self, scheduled: list[ScheduledSequence], cut: StepCut | None = None) -> list[int]:
        """Compute the scheduled tokens; return one sampled token per sampling sequence.
        `cut` may stop the step between layers (`LlamaModel.forward`)."""
        input_ids, positions, meta, sample_rows = self.prepare(scheduled)
        hidden = self.model(input_ids, positions, meta, self.kv_cache, cut)
        if not sample_rows:
            return []
        logits = self.model.compute_logits(hidden[sample_rows])
        seqs = [item.seq for item in scheduled if item.samples]
        tokens = self.sampler(apply_grammar_masks(logits, [s.grammar for s in seqs]), seqs)
        if any(seq.params.logprobs is not None for seq in seqs):
            self.sampler.record_logprobs(logits, tokens, seqs)
        return tokens

    def prepare(self, scheduled: list[ScheduledSequence]
                ) -> tuple[Tensor, Tensor, AttentionMetadata, list[int]]:
        """(input_ids [T], positions [T], metadata, rows of the hidden states to sample)."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        query_start_loc = [0]
        context_lens: list[int] = []
        sample_rows: list[int] = []
        for item in scheduled:
            seq, start = item.seq, item.seq.num_computed_tokens
            end = start + item.num_new_tokens
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            query_start_loc.append(len(input_ids))
            context_lens.append(end)
            if item.samples:
                sample_rows.append(len(input_ids) - 1)
        width = max(len(item.seq.block_table) for item in scheduled)
        tables = [item.seq.block_table + [0] * (width - len(item.seq.block_table))
                  for item in scheduled]
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=self.device),
            query_start_loc=query_start_loc,
            context_lens=context_lens,
            block_tables=torch.tensor(tables, dtype=torch.int64, device=self.device),
        )
        return (torch.tensor(input_ids, dtype=torch.int64, device=self.device),
                torch.tensor(positions, dtype=torch.int64, device=self.device), meta, sample_rows)
