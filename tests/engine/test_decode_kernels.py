"""The fused kernels (cpu_kernels/decode_ops.cpp, decode_attention.cpp,
prefill_attention.cpp) against the torch code they replace: same rounding, the cache
written where the slots say, bad input refused before anything is written."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cpu_kernels import kernels

pytestmark = pytest.mark.skipif(kernels() is None, reason="CPU kernels not built here")


def bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(torch.bfloat16)


@pytest.mark.parametrize("rows", [1, 8, 16])
def test_rms_norm_rounds_once_like_torch(rows):
    x, w = bf16(rows, 576, scale=3.0), bf16(576)
    out = kernels().rms_norm(x, w, 1e-5)
    ref = F.rms_norm(x.float(), (576,), w.float(), 1e-5).to(torch.bfloat16)
    assert (out != ref).float().mean() < 0.002  # fp32 sum order only: rare 1-ulp flips
    torch.testing.assert_close(out, ref, rtol=2 ** -7, atol=2 ** -7)


def test_add_rms_norm_writes_the_sum_into_the_residual():
    residual, delta, w = bf16(4, 576), bf16(4, 576), bf16(576)
    expected_sum = residual + delta
    kept = residual
    out = kernels().add_rms_norm_(residual, delta, w, 1e-5)
    assert kept is residual and torch.equal(residual, expected_sum)
    assert torch.equal(out, kernels().rms_norm(expected_sum, w, 1e-5))


def test_silu_mul_matches_torchs_two_roundings():
    gate_up = bf16(3, 2 * 1536, scale=4.0)
    gate, up = gate_up.split(1536, dim=-1)
    ref = F.silu(gate).mul_(up)
    out = kernels().silu_mul(gate_up)
    assert out.shape == (3, 1536)
    assert (out != ref).float().mean() < 0.002  # exp differs from torch's in the last fp32 bits
    torch.testing.assert_close(out, ref, rtol=2 ** -7, atol=1e-6)


def reference_attention(q, cache, tables, lens, block_size, scale):
    """SDPA over each sequence's gathered context, in float32."""
    outs = []
    for b, length in enumerate(lens):
        pos = torch.arange(length)
        slots = tables[b, pos // block_size] * block_size + pos % block_size
        k = cache[0].reshape(-1, *cache.shape[3:])[slots].float()  # [L, kv, D]
        v = cache[1].reshape(-1, *cache.shape[3:])[slots].float()
        o = F.scaled_dot_product_attention(q[b].float()[:, None], k.transpose(0, 1),
                                           v.transpose(0, 1), scale=scale, enable_gqa=True)
        outs.append(o[:, 0])
    return torch.stack(outs)


def test_paged_decode_attention_writes_kv_and_matches_sdpa():
    torch.manual_seed(0)
    blocks, block_size, kv, heads, d = 12, 16, 3, 9, 64
    cache = bf16(2, blocks, block_size, kv, d)
    tables = torch.tensor([[3, 7, 1, 0], [5, 2, 0, 0], [9, 0, 0, 0]])
    lens = torch.tensor([40, 17, 1])
    slots = torch.tensor([tables[b, (n - 1) // block_size] * block_size + (n - 1) % block_size
                          for b, n in enumerate(lens.tolist())])
    qkv = bf16(3, heads * d + 2 * kv * d)  # strided views, as the model passes them
    q = qkv[:, :heads * d].view(3, heads, d)
    k = qkv[:, heads * d:(heads + kv) * d].view(3, kv, d)
    v = qkv[:, (heads + kv) * d:].view(3, kv, d)
    out = kernels().paged_decode_attention(q, k, v, cache, slots, tables, lens, d ** -0.5)
    flat = cache.view(2, -1, kv, d)
    assert torch.equal(flat[0, slots], k) and torch.equal(flat[1, slots], v)
    ref = reference_attention(q, cache, tables, lens.tolist(), block_size, d ** -0.5)
    assert out.shape == (3, heads, d) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    assert torch.allclose(out[2].float(), v[2].float().repeat_interleave(3, 0), atol=1e-2)


def test_several_queries_of_one_sequence_attend_causally():
    """A short prefill chunk goes in as one query per token, each with its own length."""
    torch.manual_seed(1)
    cache = bf16(2, 8, 16, 3, 64)
    table = torch.tensor([[4, 6, 2]])
    start, n = 30, 5  # tokens at positions 30..34 of one sequence
    pos = torch.arange(start, start + n)
    slots = table[0, pos // 16] * 16 + pos % 16
    q, k, v = bf16(n, 9, 64), bf16(n, 3, 64), bf16(n, 3, 64)
    out = kernels().paged_decode_attention(q, k, v, cache, slots, table.repeat(n, 1),
                                           pos + 1, 0.125)
    ref = reference_attention(q, cache, table.repeat(n, 1), (pos + 1).tolist(), 16, 0.125)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


def chunk_reference(q, cache, table, start, block_size, scale):
    """Causal SDPA of a chunk at positions start.. over its sequence's gathered context."""
    length = start + q.shape[0]
    pos = torch.arange(length)
    slots = table[pos // block_size] * block_size + pos % block_size
    k = cache[0].reshape(-1, *cache.shape[3:])[slots].float().transpose(0, 1)[None]
    v = cache[1].reshape(-1, *cache.shape[3:])[slots].float().transpose(0, 1)[None]
    mask = pos[None, :] <= (start + torch.arange(q.shape[0]))[:, None]
    out = F.scaled_dot_product_attention(q.float().transpose(0, 1)[None], k, v, attn_mask=mask,
                                         scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


@pytest.mark.parametrize("length,start,heads,kv,d,block_size", [
    (37, 0, 9, 3, 64, 16),    # a fresh prompt, a partial last tile
    (50, 70, 9, 3, 64, 16),   # a chunk continuing a cached prefix
    (20, 5, 4, 4, 128, 8),    # no GQA, wider heads, small cache blocks
    (45, 33, 2, 1, 96, 16),   # head_dim not a multiple of 64 (32-dim value chunks)
    (3, 0, 2, 2, 32, 16),     # fewer positions than a tile, the narrowest heads
])
def test_paged_prefill_attention_writes_the_chunk_and_matches_sdpa(length, start, heads, kv, d,
                                                                   block_size):
    torch.manual_seed(length)
    used = -(-(start + length) // block_size)
    cache = bf16(2, used + 3, block_size, kv, d)
    table = torch.randperm(used + 3)[:used]  # blocks out of order
    pos = torch.arange(start, start + length)
    slots = table[pos // block_size] * block_size + pos % block_size
    qkv = bf16(length, (heads + 2 * kv) * d, scale=2.0)  # strided views, as the model passes
    q = qkv[:, :heads * d].view(length, heads, d)
    k = qkv[:, heads * d:(heads + kv) * d].view(length, kv, d)
    v = qkv[:, (heads + kv) * d:].view(length, kv, d)
    out = kernels().paged_prefill_attention(q, k, v, cache, slots, table, start, d ** -0.5)
    flat = cache.view(2, -1, kv, d)
    assert torch.equal(flat[0, slots], k) and torch.equal(flat[1, slots], v)
    ref = chunk_reference(q, cache, table, start, block_size, d ** -0.5)
    assert out.shape == (length, heads, d) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=2e-2)


def test_paged_prefill_attention_rescales_when_later_keys_score_far_higher():
    """Scores climb ~2 (base 2) per key, so every row's max is overtaken again and again by
    far more than the kernel lets its kept max lag (2^8): each time its sums are rescaled;
    the last row sees 200 keys, the others fewer."""
    torch.manual_seed(3)
    length, d = 200, 64
    direction = torch.nn.functional.normalize(torch.randn(d), dim=0)
    keys = torch.arange(length).float()[:, None] * direction * 0.5  # [L, d]
    q = (direction * 20.0).repeat(length, 2, 1).to(torch.bfloat16)  # [L, 2 heads, d]
    k = keys[:, None, :].to(torch.bfloat16)
    v = bf16(length, 1, d)
    cache = bf16(2, 14, 16, 1, d)
    table = torch.arange(1, 14)
    pos = torch.arange(length)
    slots = table[pos // 16] * 16 + pos % 16
    out = kernels().paged_prefill_attention(q, k, v, cache, slots, table, 0, d ** -0.5)
    ref = chunk_reference(q, cache, table, 0, 16, d ** -0.5)
    assert torch.isfinite(out.float()).all()
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=2e-2)


def test_paged_prefill_attention_refuses_bad_tables_before_writing():
    cache = bf16(2, 4, 16, 1, 32)
    before = cache.clone()
    q, k, v = bf16(2, 2, 32), bf16(2, 1, 32), bf16(2, 1, 32)
    with pytest.raises(RuntimeError, match="block id out of range"):
        kernels().paged_prefill_attention(q, k, v, cache, torch.tensor([17, 18]),
                                          torch.tensor([0, 9]), 17, 1.0)
    with pytest.raises(RuntimeError, match="slot out of range"):
        kernels().paged_prefill_attention(q, k, v, cache, torch.tensor([3, 64]),
                                          torch.tensor([0, 1]), 17, 1.0)
    assert torch.equal(cache, before)


def test_paged_decode_attention_refuses_bad_tables_before_writing():
    cache = bf16(2, 4, 16, 1, 32)
    before = cache.clone()
    q, k, v = bf16(1, 2, 32), bf16(1, 1, 32), bf16(1, 1, 32)
    with pytest.raises(RuntimeError, match="block id out of range"):
        kernels().paged_decode_attention(q, k, v, cache, torch.tensor([3]),
                                         torch.tensor([[0, 9]]), torch.tensor([20]), 1.0)
    with pytest.raises(RuntimeError, match="slot out of range"):
        kernels().paged_decode_attention(q, k, v, cache, torch.tensor([64]),
                                         torch.tensor([[0, 1]]), torch.tensor([20]), 1.0)
    assert torch.equal(cache, before)


def test_one_call_decode_is_bit_identical_to_the_layer_loop(smollm_bf16):
    """decode_layers.cpp runs the same kernels as LlamaModel's Python loop: same logits,
    same cache, for 1-2 rows (int4 copies), 3+ rows (AMX blocks; without AMX, every row
    count on the VNNI blocks) and short prefill chunks."""
    from tests.engine.conftest import PagedSequences

    model = smollm_bf16.model
    assert model.decode_weights is not None
    fast, loop = PagedSequences(model), PagedSequences(model)
    prompts = {0: [1, 2, 3, 4, 5] * 7, 1: [9, 8, 7] * 5, 2: [11, 12] * 20, 3: [40] * 3}
    steps = [{0: [17]}, {0: [18], 1: [19]}, {0: [20], 1: [21], 2: [22], 3: [23]},
             {0: [24], 5: [1, 2, 3, 4, 5, 6]},  # a new prompt beside a decode
             {1: [7, 8, 9], 5: [10]}]           # a chunk continuing a sequence
    for seqs in (fast, loop):
        seqs.step(prompts)
    for new in steps:
        fast_logits = fast.step(new)
        model.one_call_decode = False
        try:
            loop_logits = loop.step(new)
        finally:
            model.one_call_decode = True
        for seq in new:
            assert torch.equal(fast_logits[seq], loop_logits[seq])
        assert torch.equal(fast.kv, loop.kv)
