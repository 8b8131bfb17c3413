"""Paged attention against plain causal attention over each sequence's contiguous K/V.

Tiny random heads (fp32), blocks handed out out of order; covers the decode batch's three
gathers (one sequence, equal lengths, unequal lengths) and decodes mixed with prefill chunks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.attention import AttentionMetadata, AttentionPlan, DecodeBatch, paged_attention

BLOCK, HEADS, KV_HEADS, DIM, NUM_BLOCKS = 4, 4, 2, 8, 40


class Cache:
    """One layer's paged cache plus each sequence's full K/V history, kept contiguous."""

    def __init__(self) -> None:
        self.layer = torch.full((2, NUM_BLOCKS, BLOCK, KV_HEADS, DIM), float("nan"))
        self.free = list(range(NUM_BLOCKS - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.history: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.gen = torch.Generator().manual_seed(0)

    def step(self, new: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor, AttentionPlan]:
        """Append new[s] tokens to sequence s; returns (paged output, reference, plan)."""
        qs, ks, vs, slots, starts, lens, refs = [], [], [], [], [0], [], []
        for seq, count in new.items():
            q = torch.randn(count, HEADS, DIM, generator=self.gen)
            k, v = (torch.randn(count, KV_HEADS, DIM, generator=self.gen) for _ in range(2))
            old_k, old_v = self.history.get(seq, (k[:0], v[:0]))
            full_k, full_v = torch.cat([old_k, k]), torch.cat([old_v, v])
            self.history[seq] = (full_k, full_v)
            table = self.tables.setdefault(seq, [])
            while len(table) * BLOCK < len(full_k):
                table.append(self.free.pop())
            slots += [table[p // BLOCK] * BLOCK + p % BLOCK
                      for p in range(len(old_k), len(full_k))]
            qs.append(q), ks.append(k), vs.append(v)
            starts.append(starts[-1] + count)
            lens.append(len(full_k))
            refs.append(reference(q, full_k, full_v))
        width = max(len(t) for t in self.tables.values())
        tables = torch.tensor([self.tables[s] + [0] * (width - len(self.tables[s])) for s in new])
        meta = AttentionMetadata(torch.tensor(slots), starts, lens, tables)
        plan = AttentionPlan.build(meta, BLOCK, torch.device("cpu"))
        out = paged_attention(torch.cat(qs), torch.cat(ks), torch.cat(vs), self.layer, plan,
                              DIM ** -0.5)
        return out, torch.cat(refs), plan


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The last len(q) positions of causal attention over k/v (GQA by repeating heads)."""
    groups = HEADS // KV_HEADS
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    offset = len(k) - len(q)
    mask = torch.arange(len(k))[None, :] <= torch.arange(offset, len(k))[:, None]
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                         v.transpose(0, 1), attn_mask=mask, scale=DIM ** -0.5)
    return out.transpose(0, 1)


@pytest.fixture
def cache() -> Cache:
    return Cache()


def test_lone_decode_gathers_whole_blocks(cache: Cache) -> None:
    cache.step({0: 6})
    out, ref, plan = cache.step({0: 1})
    assert plan.decode is not None and plan.decode.blocks is not None
    assert plan.decode.rows is None and plan.decode.mask is None
    assert torch.allclose(out, ref, atol=1e-5)


def test_equal_length_decodes_need_no_mask(cache: Cache) -> None:
    cache.step({0: 5, 1: 5, 2: 5})
    for _ in range(4):  # crosses a block boundary
        out, ref, plan = cache.step({0: 1, 1: 1, 2: 1})
        assert plan.decode.blocks is not None and plan.decode.mask is None
        assert torch.allclose(out, ref, atol=1e-5)


def test_unequal_length_decodes_are_padded_and_masked(cache: Cache) -> None:
    """The cache starts as NaN: padding must never read a slot nobody wrote."""
    cache.step({0: 9, 1: 2, 2: 5})
    out, ref, plan = cache.step({0: 1, 1: 1, 2: 1})
    decode: DecodeBatch = plan.decode
    assert decode.slots is not None and decode.mask is not None
    assert decode.mask.shape == (3, 1, 1, 10)
    assert not out.isnan().any()
    assert torch.allclose(out, ref, atol=1e-5)


def test_decodes_mixed_with_prefill_chunks(cache: Cache) -> None:
    cache.step({0: 7, 1: 3})
    out, ref, plan = cache.step({0: 1, 2: 6, 1: 4})  # a decode, a fresh prompt, a chunk
    assert plan.decode.rows is not None and plan.decode.rows.tolist() == [0]
    assert len(plan.prefills) == 2
    assert torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("lens", [[20, 20, 20], [20, 7, 13]])
def test_grouped_decode_equals_sdpa_gqa_bit_for_bit_in_bf16(lens: list[int]) -> None:
    """Decode feeds each K/V head's query heads to SDPA as its query rows; the output must be
    exactly what SDPA's own GQA (one query per head, K/V repeated) gives."""
    gen = torch.Generator().manual_seed(1)
    layer = torch.randn(2, NUM_BLOCKS, BLOCK, KV_HEADS, DIM, generator=gen).bfloat16()
    width = -(-max(lens) // BLOCK)
    tables = torch.arange(len(lens) * width).view(len(lens), width)
    slots = torch.tensor([tables[i, (n - 1) // BLOCK] * BLOCK + (n - 1) % BLOCK
                          for i, n in enumerate(lens)])
    meta = AttentionMetadata(slots, list(range(len(lens) + 1)), lens, tables)
    q = torch.randn(len(lens), HEADS, DIM, generator=gen).bfloat16()
    k, v = (torch.randn(len(lens), KV_HEADS, DIM, generator=gen).bfloat16() for _ in range(2))
    plan = AttentionPlan.build(meta, BLOCK, torch.device("cpu"))
    out = paged_attention(q, k, v, layer, plan, DIM ** -0.5)
    for i, n in enumerate(lens):
        positions = torch.arange(n)
        cache_slots = tables[i][positions // BLOCK] * BLOCK + positions % BLOCK
        keys, values = layer.view(2, -1, KV_HEADS, DIM)[:, cache_slots].transpose(1, 2)
        ref = F.scaled_dot_product_attention(q[i][None, :, None, :], keys[None], values[None],
                                             scale=DIM ** -0.5, enable_gqa=True)
        assert torch.equal(out[i], ref[0, :, 0, :])
