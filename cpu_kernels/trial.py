"""The trial a fresh build of the CPU kernels must pass before the engine loads it.

    python -m cpu_kernels.trial amx|avx512

Run by cpu_kernels/build.py in a child process, so that a CPU or VM that kills the
process on an instruction it advertised (AMX on some VMs) fails the trial, not the engine.
Each kernel of the variant runs once against a float32 reference; any error exits non-zero.
"""

from __future__ import annotations

import sys
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F

from cpu_kernels.amx_blocks import AmxQ4, AmxQ8
from cpu_kernels.build import import_built
from cpu_kernels.quant_blocks import Q4Blocks


def close(got: torch.Tensor, ref: torch.Tensor, within: float) -> bool:
    return bool((got.float() - ref).abs().max() <= within * ref.abs().max())


def try_amx(module: ModuleType) -> None:
    """The AMX group-quant kernels, Q4 and Q8, against their dequantised weights."""
    assert module.amx_ready(), "AMX tile state refused"
    rng = np.random.default_rng(0)
    q4 = Q4Blocks(rng.integers(0, 16, (32, 64)).astype(np.uint8),
                  rng.random((32, 2)).astype(np.float32), rng.random((32, 2)).astype(np.float32))
    codes = rng.integers(-127, 128, (32, 64)).astype(np.int8)
    scales = rng.random((32, 2)).astype(np.float32)
    x = torch.randn(3, 64).bfloat16()
    for weight, dense in ((AmxQ4.from_blocks(q4, module), q4.dequantize()),
                          (AmxQ8.from_codes(codes, scales, module),
                           (codes.reshape(32, 2, 32) * scales[..., None]).reshape(32, 64))):
        ref = x.float() @ torch.from_numpy(dense).T
        assert close(weight.matmul(x), ref, 0.02), "wrong AMX results"


def try_avx512(module: ModuleType) -> None:
    """The kernels every variant has: a norm and the int8 matmul."""
    torch.manual_seed(0)
    x, w = torch.randn(5, 64).bfloat16(), torch.randn(64).bfloat16()
    assert close(module.rms_norm(x, w, 1e-5), F.rms_norm(x.float(), (64,), w.float(), 1e-5),
                 0.02), "wrong norm"
    weight = torch.randint(-127, 128, (32, 64), dtype=torch.int8)
    scales = torch.rand(32) / 100
    ref = x.float() @ (weight.float() * scales[:, None]).T
    assert close(module.int8_linear(x, weight.t(), scales), ref, 0.03), "wrong int8 results"


def main(variant: str) -> None:
    module = import_built()
    assert module.variant == variant, f"built {module.variant}, expected {variant}"
    if variant == "amx":
        try_amx(module)
    try_avx512(module)


if __name__ == "__main__":
    main(sys.argv[1])
