"""The AMX group-quant kernel and its tile layout: exact layout, results against float32,
which copy serves which rows, and the fallbacks when the kernel is missing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cpu_kernels import build as gqk
from cpu_kernels.amx_blocks import AmxQ4, AmxQ8, pack_q4_codes, tile_rows
from cpu_kernels.lower_path import lower_path_env
from cpu_kernels.quant_blocks import PackedInt4, Q4Blocks, Q8Blocks
from engine.weights.decode_copies import (
    AMX_MAX_ROWS,
    INT4_MAX_ROWS,
    INT4_MAX_ROWS_BESIDE_AMX,
    linear_copies,
)

needs_kernel = pytest.mark.skipif(gqk.amx_kernels() is None,
                                  reason="AMX group kernel not built here")


def q4_blocks(rows: int, cols: int, seed: int = 0) -> Q4Blocks:
    rng = np.random.default_rng(seed)
    return Q4Blocks(rng.integers(0, 16, (rows, cols)).astype(np.uint8),
                    (rng.random((rows, cols // 32)) * 0.05).astype(np.float32),
                    (rng.standard_normal((rows, cols // 32)) * 0.1).astype(np.float32))


def test_tile_rows_put_each_columns_input_pairs_side_by_side():
    w = np.arange(32 * 64).reshape(32, 64)  # W[n][k] = 64 n + k
    tiles = tile_rows(w)
    assert tiles.shape == (2, 2, 16, 32)  # [column block, group, tile row, 16 columns x 2]
    for block, group, r, c in [(0, 0, 0, 0), (0, 0, 0, 1), (1, 1, 15, 31), (0, 1, 7, 6)]:
        n, k = 16 * block + c // 2, 32 * group + 2 * r + c % 2
        assert tiles[block, group, r, c] == w[n, k]
    assert tiles[0, 0, 0, :4].tolist() == [0, 1, 64, 65]  # (W00, W01), (W10, W11)


def test_q4_codes_share_bytes_low_nibble_first():
    blocks = q4_blocks(16, 32)
    rows = tile_rows(blocks.codes)[0, 0]
    packed = pack_q4_codes(blocks.codes)[0, 0]
    assert packed.shape == (8, 32)
    assert np.array_equal(packed.numpy() & 0x0F, rows[0::2])
    assert np.array_equal(packed.numpy() >> 4, rows[1::2])


@needs_kernel
@pytest.mark.parametrize("shape", [(16, 32), (48, 96), (960, 576)])
def test_q4_kernel_matches_float32_for_every_row_count(shape):
    blocks = q4_blocks(*shape)
    weight = AmxQ4.from_blocks(blocks)
    dense = torch.from_numpy(blocks.dequantize())
    for rows in range(1, AMX_MAX_ROWS + 1):
        x = torch.randn(rows, shape[1]).bfloat16()
        ref = x.float() @ dense.T
        got = weight.matmul(x)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, shape[0])
        # bf16 output rounding is the error: at most ~1/256 of the largest value
        assert (got.float() - ref).abs().max() <= 6e-3 * ref.abs().max()


@needs_kernel
def test_q8_kernel_is_as_exact_as_the_bf16_output_allows():
    rng = np.random.default_rng(1)
    codes = rng.integers(-127, 128, (64, 96)).astype(np.int8)
    scales = (rng.random((64, 3)) * 0.01).astype(np.float32)
    weight = AmxQ8.from_codes(codes, scales)
    dense = torch.from_numpy(Q8Blocks(codes, scales).dequantize())
    x = torch.randn(5, 96).bfloat16()
    ref = x.float() @ dense.T
    got = weight.matmul(x).float()
    assert torch.allclose(got, ref, rtol=8e-3, atol=1e-3 * ref.abs().max().item())


@needs_kernel
def test_kernel_rejects_what_it_cannot_serve():
    weight = AmxQ4.from_blocks(q4_blocks(16, 32))
    with pytest.raises(RuntimeError, match="1 to 16 rows"):
        weight.matmul(torch.randn(AMX_MAX_ROWS + 1, 32).bfloat16())
    with pytest.raises(RuntimeError, match="bf16"):
        weight.matmul(torch.randn(2, 32))
    with pytest.raises(RuntimeError, match="64 columns, the weight takes 32"):
        weight.matmul(torch.randn(2, 64).bfloat16())


@needs_kernel
def test_q4_linear_keeps_int4_for_one_or_two_rows_and_amx_up_to_sixteen():
    copies = linear_copies(q4_blocks(32, 64))
    assert [(c.max_rows, type(c.weight)) for c in copies] == [
        (INT4_MAX_ROWS_BESIDE_AMX, PackedInt4), (AMX_MAX_ROWS, AmxQ4)]
    assert [type(c.weight) for c in linear_copies(Q8Blocks(np.zeros((16, 32), np.int8),
                                                           np.ones((16, 1), np.float32)))] == [AmxQ8]


def test_without_the_kernel_q4_linears_keep_torchs_int4_up_to_four_rows(monkeypatch):
    monkeypatch.setenv("HEADSTART_KERNELS", "0")
    gqk.kernels.cache_clear()
    try:
        copies = linear_copies(q4_blocks(32, 64))
        assert [(c.max_rows, type(c.weight)) for c in copies] == [(INT4_MAX_ROWS, PackedInt4)]
        assert linear_copies(Q8Blocks(np.zeros((16, 32), np.int8),
                                      np.ones((16, 1), np.float32))) == ()
    finally:
        monkeypatch.undo()
        gqk.kernels.cache_clear()


def test_a_build_from_another_source_is_not_loaded(monkeypatch, tmp_path):
    monkeypatch.setenv("HEADSTART_KERNEL_DIR", str(tmp_path))
    (tmp_path / gqk.VERIFIED).write_text("0" * 64)
    gqk.kernels.cache_clear()
    try:
        assert not gqk.verified()
        assert gqk.kernels() is None
    finally:
        monkeypatch.undo()
        gqk.kernels.cache_clear()


def test_the_variant_follows_the_cpu_flags_and_the_setting(tmp_path):
    """AMX CPUs build every kernel but the VNNI decode matmuls, AVX-512 BF16 + VNNI ones all
    but the AMX sources, others none; HEADSTART_KERNELS=avx512 masks AMX and 0 turns the
    kernels off."""
    info = tmp_path / "cpuinfo"
    avx512 = "avx512f avx512bw avx512vl avx512_bf16 avx512_vnni"
    info.write_text(f"processor : 0\nflags : fpu {avx512} amx_tile\n")
    assert gqk.variant_for(gqk.cpu_flags(str(info)), "1") is gqk.AVX512  # no amx_bf16
    info.write_text(f"processor : 0\nflags : fpu {avx512} amx_tile amx_bf16\n")
    flags = gqk.cpu_flags(str(info))
    assert gqk.variant_for(flags, "1") is gqk.AMX
    assert gqk.variant_for(flags, "avx512") is gqk.AVX512
    assert gqk.variant_for(flags, "0") is None
    assert gqk.variant_for({"avx512f", "avx512bw", "avx512vl", "avx2"}, "1") is None
    assert gqk.cpu_flags(str(tmp_path / "missing")) == set()
    amx, avx = {p.name for p in gqk.AMX.sources}, {p.name for p in gqk.AVX512.sources}
    assert amx - avx == set(gqk.AMX_SOURCES) and avx - amx == set(gqk.AVX512_ONLY_SOURCES)
    assert "-mamx-tile" not in gqk.AVX512.cflags and gqk.source_hash(gqk.AMX) != gqk.source_hash(
        gqk.AVX512)


def test_the_second_test_pass_takes_the_path_one_step_down():
    """`make test` runs the engine and gateway tests again one path down: an AMX machine
    on the avx512 variant (built in a folder of its own), an AVX-512 one on torch's
    kernels; a machine already on torch's kernels has nothing lower to run."""
    assert lower_path_env("amx", "/v/kernels") == {"HEADSTART_KERNELS": "avx512",
                                                   "HEADSTART_KERNEL_DIR": "/v/kernels-avx512"}
    assert lower_path_env("avx512", "/v/kernels") == {"HEADSTART_KERNELS": "0"}
    assert lower_path_env(None, "/v/kernels") is None


def test_setup_on_a_cpu_without_avx512_builds_nothing_and_forgets_a_stale_build(
        monkeypatch, tmp_path, capsys):
    """`python -m cpu_kernels.build` where the CPU lacks the instructions: no build, and
    a marker left from another machine no longer lets the engine load anything."""
    monkeypatch.setenv("HEADSTART_KERNEL_DIR", str(tmp_path))
    (tmp_path / gqk.VERIFIED).write_text(gqk.source_hash(gqk.AVX512))
    monkeypatch.setattr(gqk, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": {"avx2", "fma"})
    gqk.kernels.cache_clear()
    try:
        assert gqk.main() == 0
        assert "lacks" in capsys.readouterr().out
        assert not (tmp_path / gqk.VERIFIED).exists() and not gqk.verified()
        assert gqk.kernels() is None and gqk.kernel_path() == "torch fallback"
    finally:
        monkeypatch.undo()
        gqk.kernels.cache_clear()
