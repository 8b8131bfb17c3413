"""Attention over the paged KV cache: the step's flat batch metadata and the kernel.

The cache of one layer is `[2, num_blocks, block_size, num_kv_heads, head_dim]`. Each new
token's K/V is written at its slot (`block_id * block_size + offset`); each sequence then
attends its queries (the last `q_len` of its `context_len` positions) over the context it
gathers through its block table. Decodes (q_len == 1) are gathered into one padded batch
and run as a single SDPA call; prefill chunks run one SDPA call per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class AttentionMetadata:
    """One step's flat batch, as the model runner builds it (see docs/internals.md)."""

    slot_mapping: Tensor        # [num_tokens] int64, where each new token's K/V is written
    query_start_loc: list[int]  # [num_seqs + 1] cumulative count of new tokens per sequence
    context_lens: list[int]     # [num_seqs] cached + new tokens after this step
    block_tables: Tensor        # [num_seqs, max_blocks] int64, padded with 0


@dataclass
class PrefillChunk:
    """One sequence with several new tokens; `slots`/`mask` are None for a fresh prompt."""

    start: int
    end: int
    slots: Tensor | None
    mask: Tensor | None


@dataclass
class AttentionPlan:
    """Index tensors derived from the metadata once per step and shared by every layer."""

    slot_mapping: Tensor
    num_tokens: int
    decode_rows: Tensor | None       # [B] token rows of the single-token sequences
    decode_slots: Tensor | None      # [B * ctx_max] cache slots, padding repeats a valid slot
    decode_mask: Tensor | None       # [B, 1, 1, ctx_max] True where a key is in context
    prefills: list[PrefillChunk]

    @classmethod
    def build(cls, meta: AttentionMetadata, block_size: int, device: torch.device) -> AttentionPlan:
        tables = meta.block_tables.to(device=device, dtype=torch.long)
        starts = meta.query_start_loc
        decode_seqs, prefills = [], []
        for i, ctx in enumerate(meta.context_lens):
            start, end = starts[i], starts[i + 1]
            q_len = end - start
            if q_len == 1:
                decode_seqs.append(i)
            elif q_len == ctx:
                prefills.append(PrefillChunk(start, end, None, None))
            elif q_len > 1:
                slots = _slots(tables[i:i + 1], torch.tensor([ctx], device=device), ctx, block_size)
                key_pos = torch.arange(ctx, device=device)
                query_pos = torch.arange(ctx - q_len, ctx, device=device)
                mask = key_pos[None, :] <= query_pos[:, None]
                prefills.append(PrefillChunk(start, end, slots, mask))
        decode_rows = decode_slots = decode_mask = None
        if decode_seqs:
            ctx_lens = torch.tensor([meta.context_lens[i] for i in decode_seqs], device=device)
            ctx_max = int(max(meta.context_lens[i] for i in decode_seqs))
            decode_rows = torch.tensor([starts[i] for i in decode_seqs], device=device)
            decode_slots = _slots(tables[decode_seqs], ctx_lens, ctx_max, block_size)
            decode_mask = (torch.arange(ctx_max, device=device)[None, :] < ctx_lens[:, None])
            decode_mask = decode_mask[:, None, None, :]
        return cls(meta.slot_mapping.to(device=device, dtype=torch.long), starts[-1], decode_rows, decode_slots,
                   decode_mask, prefills)


def _slots(tables: Tensor, ctx_lens: Tensor, ctx_max: int, block_size: int) -> Tensor:
    """Flat cache slots of positions [0, ctx_max) for each row of `tables`.

    Positions past a sequence's own length repeat its last slot, so padding never reads
    an unwritten (possibly NaN) part of the cache.
    """
    pos = torch.arange(ctx_max, device=tables.device)[None, :]
    pos = torch.minimum(pos, (ctx_lens[:, None] - 1).clamp(min=0))
    blocks = torch.gather(tables, 1, pos // block_size)
    return (blocks * block_size + pos % block_size).reshape(-1)


def paged_attention(q: Tensor, k: Tensor, v: Tensor, layer_cache: Tensor,
                    plan: AttentionPlan, scale: float) -> Tensor:
    """q: [T, heads, d]; k, v: [T, kv_heads, d]; layer_cache: [2, blocks, block_size, kv, d].

    Writes k/v into the cache, returns the attention output [T, heads, d].
    """
    num_kv, head_dim = layer_cache.shape[-2], layer_cache.shape[-1]
    k_cache = layer_cache[0].view(-1, num_kv, head_dim)
    v_cache = layer_cache[1].view(-1, num_kv, head_dim)
    k_cache.index_copy_(0, plan.slot_mapping, k)
    v_cache.index_copy_(0, plan.slot_mapping, v)
    gqa = q.shape[1] != num_kv
    out = torch.empty_like(q)
    for chunk in plan.prefills:  # 4-D [1, heads, len, d]: CPU flash attention needs a batch dim
        qs = q[None, chunk.start:chunk.end].transpose(1, 2)
        if chunk.slots is None:
            ks = k[None, chunk.start:chunk.end].transpose(1, 2)
            vs = v[None, chunk.start:chunk.end].transpose(1, 2)
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale,
                                               enable_gqa=gqa)
        else:
            ks = k_cache.index_select(0, chunk.slots)[None].transpose(1, 2)
            vs = v_cache.index_select(0, chunk.slots)[None].transpose(1, 2)
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=chunk.mask, scale=scale,
                                               enable_gqa=gqa)
        out[chunk.start:chunk.end] = o[0].transpose(0, 1)
    if plan.decode_rows is not None:
        batch = plan.decode_rows.shape[0]
        qd = q.index_select(0, plan.decode_rows)[:, :, None, :]
        kd = k_cache.index_select(0, plan.decode_slots).view(batch, -1, num_kv, head_dim)
        vd = v_cache.index_select(0, plan.decode_slots).view(batch, -1, num_kv, head_dim)
        o = F.scaled_dot_product_attention(qd, kd.transpose(1, 2), vd.transpose(1, 2),
                                           attn_mask=plan.decode_mask, scale=scale,
                                           enable_gqa=gqa)
        out.index_copy_(0, plan.decode_rows, o[:, :, 0, :])
    return out
