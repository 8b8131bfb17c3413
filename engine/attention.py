"""Attention over the paged KV cache: the step's flat batch metadata and the kernel.

The cache of one layer is `[2, num_blocks, block_size, num_kv_heads, head_dim]`. Each new
token's K/V is written at its slot (`block_id * block_size + offset`); each sequence then
attends its queries (the last `q_len` of its `context_len` positions) over the context it
gathers through its block table. Steps of at most SMALL_STEP_TOKENS new tokens go, where
it is built, to the compiled kernel that reads the cache in place, one query per token.
Otherwise decodes (q_len == 1) are gathered into one padded batch and run as a single SDPA
call (K and V in one gather), and prefill chunks run one call per sequence: the compiled
flash-style kernel over the paged cache where it is built (cpu_kernels/
prefill_attention.cpp: no gathered context, no mask), else SDPA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from cpu_kernels import kernels


@dataclass
class AttentionMetadata:
    """One step's flat batch, as the model runner builds it (see docs/internals.md)."""

    slot_mapping: Tensor        # [num_tokens] int64, where each new token's K/V is written
    query_start_loc: list[int]  # [num_seqs + 1] cumulative count of new tokens per sequence
    context_lens: list[int]     # [num_seqs] cached + new tokens after this step
    block_tables: Tensor        # [num_seqs, max_blocks] int64, padded with 0


@dataclass
class PrefillChunk:
    """One sequence with several new tokens. For SDPA, `slots`/`mask` gather and mask its
    context (None for a fresh prompt); for the compiled kernel, `table` is its block table
    and `context_start` the position of its first new token."""

    start: int
    end: int
    slots: Tensor | None
    mask: Tensor | None
    table: Tensor | None = None
    context_start: int = 0


@dataclass
class DecodeBatch:
    """The step's single-token sequences, attended as one batch of `ctx_max` keys each.

    Sequences of equal length gather whole blocks (no padding, no mask: a few large copies);
    otherwise slots are gathered, padded to the longest context with a valid slot (so no
    unwritten, possibly NaN, key is ever read) and masked.
    """

    rows: Tensor | None    # [B] token rows; None when they are every row of the step, in order
    blocks: Tensor | None  # [B * num_blocks] the block tables, when every length is equal
    slots: Tensor | None   # [B * ctx_max] cache slots, padding repeats a valid slot
    mask: Tensor | None    # [B, 1, 1, ctx_max] True where a key is in context
    batch: int
    ctx_max: int

    @classmethod
    def build(cls, seqs: list[int], meta: AttentionMetadata, tables: Tensor, block_size: int,
              device: torch.device) -> DecodeBatch:
        starts, lens = meta.query_start_loc, [meta.context_lens[i] for i in seqs]
        ctx_max = max(lens)
        rows = None
        if len(seqs) != starts[-1]:
            rows = torch.tensor([starts[i] for i in seqs], device=device)
        if min(lens) == ctx_max:
            num_blocks = -(-ctx_max // block_size)
            blocks = tables[seqs[0], :num_blocks] if len(seqs) == 1 else tables[seqs, :num_blocks]
            return cls(rows, blocks.reshape(-1), None, None, len(seqs), ctx_max)
        ctx_lens = torch.tensor(lens, device=device)
        slots = _slots(tables[seqs], ctx_lens, ctx_max, block_size)
        mask = (torch.arange(ctx_max, device=device)[None, :] < ctx_lens[:, None])
        return cls(rows, None, slots, mask[:, None, None, :], len(seqs), ctx_max)

    def keys_values(self, layer_cache: Tensor) -> Tensor:
        """[2, B, ctx_max, kv_heads, head_dim]: K and V of every sequence, in one gather."""
        num_kv, head_dim = layer_cache.shape[-2], layer_cache.shape[-1]
        if self.blocks is not None:
            kv = layer_cache.index_select(1, self.blocks).view(2, self.batch, -1, num_kv, head_dim)
            return kv[:, :, :self.ctx_max]
        kv = layer_cache.view(2, -1, num_kv, head_dim).index_select(1, self.slots)
        return kv.view(2, self.batch, self.ctx_max, num_kv, head_dim)


# Steps of at most this many new tokens attend token by token with the compiled kernel
# (cpu_kernels/decode_attention.cpp): each token is one query over its own context (its
# position + 1) through its sequence's block table, so short prefill chunks ride along.
SMALL_STEP_TOKENS = 16


@dataclass
class TokenQueries:
    """Per new token of a small step: its sequence's block table and its context length."""

    tables: Tensor  # [T, max_blocks] int64
    lens: Tensor    # [T] int64: position + 1

    @classmethod
    def build(cls, meta: AttentionMetadata, tables: Tensor, device: torch.device) -> TokenQueries:
        starts, rows, lens = meta.query_start_loc, [], []
        for i, ctx in enumerate(meta.context_lens):
            q_len = starts[i + 1] - starts[i]
            rows += [i] * q_len
            lens += range(ctx - q_len + 1, ctx + 1)
        same = rows == list(range(tables.shape[0]))  # one token per sequence, in order
        return cls(tables if same else tables[rows], torch.tensor(lens, device=device))


@dataclass
class AttentionPlan:
    """Index tensors derived from the metadata once per step and shared by every layer."""

    slot_mapping: Tensor
    num_tokens: int
    decode: DecodeBatch | None
    prefills: list[PrefillChunk]
    tokens: TokenQueries | None  # set instead of decode/prefills for a small kernel step
    kernel_prefills: bool = False  # prefill chunks go to the compiled kernel

    @classmethod
    def build(cls, meta: AttentionMetadata, block_size: int, device: torch.device,
              token_queries: bool = False, kernel_prefills: bool = False) -> AttentionPlan:
        """`token_queries`: the compiled kernels can serve this step's layers; a small step
        then gets only `tokens`, and none of the torch path's gathers and masks.
        `kernel_prefills`: so can prefill_attention.cpp, which then takes the prefill chunks
        of larger steps (no gathers, no masks either)."""
        tables = meta.block_tables.to(device=device, dtype=torch.long)
        starts = meta.query_start_loc
        slot_mapping = meta.slot_mapping.to(device=device, dtype=torch.long)
        if token_queries and starts[-1] <= SMALL_STEP_TOKENS:
            return cls(slot_mapping, starts[-1], None, [], TokenQueries.build(meta, tables, device))
        decode_seqs, prefills = [], []
        for i, ctx in enumerate(meta.context_lens):
            start, end = starts[i], starts[i + 1]
            q_len = end - start
            if q_len == 1:
                decode_seqs.append(i)
            elif kernel_prefills:
                prefills.append(PrefillChunk(start, end, None, None, tables[i], ctx - q_len))
            elif q_len == ctx:
                prefills.append(PrefillChunk(start, end, None, None))
            elif q_len > 1:
                slots = _slots(tables[i:i + 1], torch.tensor([ctx], device=device), ctx, block_size)
                key_pos = torch.arange(ctx, device=device)
                query_pos = torch.arange(ctx - q_len, ctx, device=device)
                mask = key_pos[None, :] <= query_pos[:, None]
                prefills.append(PrefillChunk(start, end, slots, mask))
        decode = None
        if decode_seqs:
            decode = DecodeBatch.build(decode_seqs, meta, tables, block_size, device)
        return cls(slot_mapping, starts[-1], decode, prefills, None, kernel_prefills)


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
    if plan.tokens is not None:  # a small step the plan gave to the compiled kernel
        return kernels().paged_decode_attention(q, k, v, layer_cache, plan.slot_mapping,
                                                plan.tokens.tables, plan.tokens.lens, scale)
    if plan.kernel_prefills and plan.decode is None:
        return _kernel_prefills(q, k, v, layer_cache, plan, scale)
    num_kv, head_dim = layer_cache.shape[-2], layer_cache.shape[-1]
    k_cache = layer_cache[0].view(-1, num_kv, head_dim)
    v_cache = layer_cache[1].view(-1, num_kv, head_dim)
    k_cache.index_copy_(0, plan.slot_mapping, k)
    v_cache.index_copy_(0, plan.slot_mapping, v)
    gqa = q.shape[1] != num_kv
    decode = plan.decode
    if decode is not None and decode.rows is None:  # a decode-only step: no scatter back
        return _decode_attention(q, layer_cache, decode, scale)
    if plan.kernel_prefills:  # prefill chunks beside decodes: the decodes' K/V are written
        out = _kernel_prefills(q, k, v, layer_cache, plan, scale)
        qd = q.index_select(0, decode.rows)
        out.index_copy_(0, decode.rows, _decode_attention(qd, layer_cache, decode, scale))
        return out
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
    if decode is not None:
        qd = q.index_select(0, decode.rows)
        out.index_copy_(0, decode.rows, _decode_attention(qd, layer_cache, decode, scale))
    return out


def _kernel_prefills(q: Tensor, k: Tensor, v: Tensor, layer_cache: Tensor, plan: AttentionPlan,
                     scale: float) -> Tensor:
    """Each prefill chunk through cpu_kernels/prefill_attention.cpp (which writes its
    K/V); rows of other tokens are left for the caller."""
    ops = kernels()
    if len(plan.prefills) == 1 and plan.prefills[0].end - plan.prefills[0].start == q.shape[0]:
        c = plan.prefills[0]
        return ops.paged_prefill_attention(q, k, v, layer_cache, plan.slot_mapping, c.table,
                                           c.context_start, scale)
    out = torch.empty_like(q)
    for c in plan.prefills:
        out[c.start:c.end] = ops.paged_prefill_attention(
            q[c.start:c.end], k[c.start:c.end], v[c.start:c.end], layer_cache,
            plan.slot_mapping[c.start:c.end], c.table, c.context_start, scale)
    return out


def _decode_attention(q: Tensor, layer_cache: Tensor, decode: DecodeBatch,
                      scale: float) -> Tensor:
    """q: [B, heads, d], one query per sequence -> [B, heads, d].

    The query heads sharing a K/V head go in as that head's query rows ([B, kv_heads,
    group, d]), so SDPA reads each K/V head once for its whole group instead of once per
    query head: the same sums (bit-identical up to a few hundred keys), half the time on
    2 threads at batch 8.
    """
    kv = decode.keys_values(layer_cache).transpose(2, 3)  # [2, B, kv_heads, ctx, d]
    batch, heads, head_dim = q.shape
    num_kv = kv.shape[2]
    o = F.scaled_dot_product_attention(q.view(batch, num_kv, heads // num_kv, head_dim),
                                       kv[0], kv[1], attn_mask=decode.mask, scale=scale)
    return o.reshape(batch, heads, head_dim)
