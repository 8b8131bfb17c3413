"""The int8 path (cpu_kernels/int8_linear.cpp, engine/weights/int8.py): the kernel
against a float32 reference of the same quantisation, which rows a linear sends to it, and
the answers' quality on a slice of the fixed English text (bench/engine/int8_quality.py has the
full figures)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from bench.engine.int8_quality import chat_prompts, decisions, greedy, perplexity, text_ids
from cpu_kernels import PackedW8A8, kernels
from engine.model import LINEARS
from engine.weights import load_model

pytestmark = pytest.mark.skipif(kernels() is None or not hasattr(kernels(), "int8_linear"),
                                reason="CPU kernels not built here")


def reference(x: torch.Tensor, w: PackedW8A8, bias: torch.Tensor | None) -> torch.Tensor:
    """The kernel's arithmetic in float32: x * smooth quantised per row, times the codes,
    plus the outlier channels in float."""
    xs = x.float() * (w.smooth if w.smooth is not None else 1)
    scale = xs.abs().amax(dim=1, keepdim=True) / 127
    q = torch.round(xs / scale).clamp(-127, 127)
    y = (q @ w.weight_t.float()) * scale * w.scales
    if w.outlier_cols is not None:
        y = y + x.float()[:, w.outlier_cols] @ w.outlier_weight
    return y if bias is None else y + bias.float()


@pytest.mark.parametrize("rows,outliers", [(1, 0), (5, 3), (64, 8)])
def test_int8_linear_is_the_quantised_product_rounded_once(rows, outliers):
    torch.manual_seed(rows)
    weight = torch.randn(48, 96) * 0.05
    maxima = torch.rand(96) * 4 + 0.1
    w = PackedW8A8.from_dense(weight, kernels(), maxima, outliers)
    bias = torch.randn(48).bfloat16()
    x = (torch.randn(rows, 96) * maxima).bfloat16()
    got = w.matmul(x, bias)
    ref = reference(x, w, bias)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 48)
    torch.testing.assert_close(got.float(), ref, rtol=2 ** -7, atol=1e-3)
    # and the whole thing stays near the exact product: int8 steps, not arbitrary error
    exact = x.float() @ weight.T + bias.float()
    assert (got.float() - exact).abs().max() < 0.03 * exact.abs().max()


def test_smoothing_moves_an_outlier_channel_into_the_weight():
    """One input channel 100x the others: per-row scales alone lose the rest; smoothed, the
    error shrinks several times."""
    torch.manual_seed(0)
    weight = torch.randn(32, 64) * 0.05
    x = torch.randn(16, 64)
    x[:, 5] *= 100
    x = x.bfloat16()
    exact = x.float() @ weight.T
    plain = PackedW8A8.from_dense(weight, kernels()).matmul(x).float()
    smooth = PackedW8A8.from_dense(weight, kernels(), x.float().abs().amax(0)).matmul(x).float()
    assert (smooth - exact).abs().mean() * 3 < (plain - exact).abs().mean()


def test_outlier_channels_stay_out_of_the_int8_product():
    """Two channels 100x the rest (10x after smoothing): kept in float, they neither set a
    row's scale nor lose precision; the int8 codes of their weight columns are zero."""
    torch.manual_seed(1)
    weight = torch.randn(32, 64) * 0.05
    x = torch.randn(16, 64)
    x[:, [3, 40]] *= 100
    x = x.bfloat16()
    maxima = x.float().abs().amax(0)
    exact = x.float() @ weight.T
    smooth = PackedW8A8.from_dense(weight, kernels(), maxima)
    split = PackedW8A8.from_dense(weight, kernels(), maxima, outliers=2)
    assert split.outlier_cols.tolist() == [3, 40]
    assert split.weight_t[[3, 40]].abs().max() == 0 and split.smooth[[3, 40]].abs().max() == 0
    error = {name: (w.matmul(x).float() - exact).abs().mean()
             for name, w in (("smooth", smooth), ("split", split))}
    assert error["split"] * 2 < error["smooth"], error
    torch.testing.assert_close(x.float() @ split.dequantize().T, exact, rtol=0.05, atol=0.5)


def test_quantize_rows_saturates_nothing_and_zero_rows_stay_zero():
    x = torch.tensor([[0.0] * 16, [1.0, -2.0] + [0.5] * 14]).bfloat16()
    q, scales = kernels().quantize_rows(x)
    assert q.dtype == torch.int8 and scales.tolist()[0] == 0.0
    assert q[0].abs().max() == 0 and q[1].tolist()[:2] == [64, -127]
    assert scales[1].item() == pytest.approx(2 / 127)


@contextlib.contextmanager
def without_int8(model):
    """The same model on bf16 matmuls for a while (the copies detached, then restored)."""
    linears = [layer.get_submodule(n) for layer in model.layers for n in LINEARS]
    kept = [linear.int8_weight for linear in linears]
    for linear in linears:
        linear.int8_weight = None
    try:
        yield model
    finally:
        for linear, copy in zip(linears, kept, strict=True):
            linear.int8_weight = copy


@pytest.fixture(scope="module")
def int8_model(smollm_path):
    model, tokenizer, _ = load_model(smollm_path, dtype="bfloat16", device="cpu", int8=True)
    assert "int8 matmuls" in model.cpu_path
    return model, tokenizer


def test_linears_send_rows_above_the_decode_copies_to_int8(int8_model):
    model, _ = int8_model
    qkv = model.layers[2].self_attn.qkv_proj
    above = max((c.most_rows for c in qkv.decode_copies), default=0) + 1
    for rows in (above, above + 23):
        x = torch.randn(rows, model.config.hidden_size).bfloat16()
        with torch.inference_mode():
            assert torch.equal(qkv(x), qkv.int8_weight.matmul(x, qkv.bias))


def test_int8_perplexity_within_two_percent_of_float32(int8_model, smollm_fp32):
    """One window of 512 tokens, as bench/engine/int8_quality.py reads the whole text (about +1%
    here). Two windows of 256 put twice as many tokens at the start of a window, where
    perplexity is highest and a rounding anywhere moves it most (+1.7% to +2.2% with
    attention kernels of equal error against float32)."""
    model, tokenizer = int8_model
    ids = text_ids(tokenizer, 512)
    ref = perplexity(smollm_fp32.model, ids, window=512)
    ours = perplexity(model, ids, window=512)
    assert abs(ours / ref - 1) < 0.02, (ours, ref)


def test_int8_greedy_decisions_match_bf16_nine_times_in_ten(int8_model):
    """Along bf16's own greedy answers (32 tokens, 8 chat prompts), the int8 path picks the
    same next token at >= 90% of positions on average."""
    model, tokenizer = int8_model
    shares = []
    for prompt in chat_prompts(tokenizer):
        with without_int8(model):
            answer = greedy(model, prompt)
            theirs = decisions(model, prompt, answer)
        ours = decisions(model, prompt, answer)
        shares.append(sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(answer))
    assert sum(shares) / len(shares) >= 0.9, shares
