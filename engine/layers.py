"""The building blocks of a Llama layer: RMSNorm, rotary position embedding, SwiGLU MLP."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cpu_kernels import kernels
from engine.onednn_weight import packed_linear_weight


def fused_ops(x: Tensor) -> ModuleType | None:
    """The engine's compiled kernels (cpu_kernels/) when they serve `x` (bf16 on the CPU)."""
    if x.dtype != torch.bfloat16 or x.device.type != "cpu":
        return None
    return kernels()


class RMSNorm(nn.Module):
    """Root-mean-square norm, accumulated in float32 for bf16 input.

    On the CPU, torch's rms_norm is ~9 small ops. bf16 rows go to the compiled kernel
    (cpu_kernels/decode_ops.cpp, which also folds in the residual add) where it is built;
    otherwise to the fused LayerNorm kernel: [x, -x] has zero mean and variance mean(x^2),
    so its LayerNorm is x's RMSNorm (measured bit-identical up to 64 rows, 1 bf16 ulp at
    2,048).
    """

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self._doubled: tuple[tuple[int, int], Tensor] | None = None

    def _kernels(self, x: Tensor) -> ModuleType | None:
        if x.dim() != 2 or x.shape[-1] % 16 or not x.is_contiguous():
            return None
        return fused_ops(x)

    def forward(self, x: Tensor) -> Tensor:
        """Normalised `x` in the weight's dtype (`x` may be a float32 residual stream)."""
        ops = self._kernels(x)
        if ops is not None:
            return ops.rms_norm(x, self.weight, self.eps)
        if x.dtype != self.weight.dtype:  # rounded once, as the kernel does
            return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype),
                              self.eps).to(self.weight.dtype)
        if x.dtype == torch.bfloat16 and x.device.type == "cpu":
            hidden = x.shape[-1]
            out = F.layer_norm(torch.cat((x, -x), dim=-1), (2 * hidden,), self.doubled_weight(),
                               None, self.eps)
            return out[..., :hidden].contiguous()
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    def add_forward(self, delta: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        """(norm(residual + delta), residual + delta); the sum may be written into `residual`,
        which is bf16 or a float32 residual stream (`engine.model.residual_stream`), to
        which `delta` may come in float32 too."""
        ops = fused_ops(self.weight)
        if (ops is not None and _kernel_rows(delta) and _kernel_rows(residual)
                and residual.shape == delta.shape
                and (residual.dtype == torch.float32 or delta.dtype == torch.bfloat16)):
            return ops.add_rms_norm_(residual, delta, self.weight, self.eps), residual
        residual = residual + delta
        return self(residual), residual

    def doubled_weight(self) -> Tensor:
        """[weight, weight], rebuilt if the weight is reloaded in place."""
        key = (self.weight.data_ptr(), self.weight._version)
        if self._doubled is None or self._doubled[0] != key:
            self._doubled = key, torch.cat((self.weight, self.weight)).detach()
        return self._doubled[1]


def _kernel_rows(x: Tensor) -> bool:
    """Rows the norm kernels take: 2-D, contiguous, in 16s, bf16 or float32."""
    return (x.dim() == 2 and x.shape[-1] % 16 == 0 and x.is_contiguous()
            and x.dtype in (torch.bfloat16, torch.float32))


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None = None,
                  freq_factors: Tensor | None = None) -> Tensor:
    """Inverse frequencies of RoPE, with Llama-3 or linear `rope_scaling` applied.

    `freq_factors` is the `rope_freqs` tensor llama.cpp stores in Llama-3 GGUFs instead of
    the scaling parameters: the inverse frequencies are divided by it.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim
    inv_freq = 1.0 / theta**exponents
    if freq_factors is not None:
        return (inv_freq / freq_factors.double()).float()
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind not in (None, "default"):
        raise ValueError(f"unsupported rope_scaling type {kind!r}")
    return inv_freq.float()


class RotaryEmbedding:
    """Rotates query/key halves (the Hugging Face layout) by position-dependent angles.

    Not a module on purpose: the frequencies stay float32 when the model moves to bf16.
    """

    def __init__(self, inv_freq: Tensor) -> None:
        self.inv_freq = inv_freq

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and signed sin [T, 1, head_dim], computed once per step for all layers."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        # rotate-half's minus sign is folded into sin here, once per step, not per layer
        return (torch.cat((cos, cos), dim=-1)[:, None, :].to(dtype),
                torch.cat((-sin, sin), dim=-1)[:, None, :].to(dtype))


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [T, heads, head_dim]; `sin` as `RotaryEmbedding.cos_sin` returns it (sign folded in).

    Same rounding as the Hugging Face `x * cos + rotate_half(x) * sin`, in fewer passes.
    bf16 CPU steps rotate `x` in place with one compiled kernel where it is built: use the
    returned tensor, and do not count on `x` either way.
    """
    ops = fused_ops(x)
    if ops is not None and x.dim() == 3 and x.shape[-1] % 32 == 0 and x.stride(-1) == 1:
        ops.rope_(x, cos, sin)
        return x
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return (x * cos).add_(swapped.mul_(sin))


@dataclass(frozen=True)
class DecodeCopy:
    """A packed low-bit copy of a weight (`weight.matmul(x)` = x @ W.T for bf16 x), the
    most rows its kernel takes in one call, and up to how many rows it still beats the
    other weights when called on slices of at most `max_rows` (0: never sliced)."""

    max_rows: int
    weight: Any
    sliced_max_rows: int = 0

    @property
    def most_rows(self) -> int:
        """The most rows this copy serves, whole or sliced."""
        return max(self.max_rows, self.sliced_max_rows)


def decode_matmul(copies: tuple[DecodeCopy, ...], x: Tensor) -> Tensor | None:
    """x @ W.T by the first copy that serves x's rows, whole or in even slices; None where
    the dense (or int8) weight should."""
    if not copies or x.dtype != torch.bfloat16:
        return None
    rows = x.shape[0]
    for copy in copies:
        if rows <= copy.max_rows:
            return copy.weight.matmul(x)
    for copy in copies:
        if rows <= copy.sliced_max_rows:
            slices = -(-rows // copy.max_rows)
            return torch.cat([copy.weight.matmul(part.contiguous())
                              for part in x.tensor_split(slices)])
    return None


class Linear(nn.Linear):
    """nn.Linear that may also hold packed low-bit copies (engine/weights/decode_copies.py)
    for steps with few rows, where reading the weights is the whole cost. bf16 CPU steps
    with more rows use the int8 copy where the loader gave one (engine/weights/int8.py:
    rows quantised on the fly, twice bf16's rate on AVX-512 VNNI), else a oneDNN-prepacked
    bf16 copy (same results as F.linear, no per-call reorder)."""

    decode_copies: tuple[DecodeCopy, ...] = ()
    int8_weight: Any = None  # PackedW8A8, attached by the loader
    packed_weight: Any = None  # PackedBf16, made on the first bf16 CPU call

    def forward(self, x: Tensor) -> Tensor:
        out = decode_matmul(self.decode_copies, x)
        if out is not None:
            return out if self.bias is None else out + self.bias
        if self.int8_weight is not None and x.dtype == torch.bfloat16:
            return self.int8_weight.matmul(x, self.bias)
        if x.dtype == torch.bfloat16 and x.device.type == "cpu":
            packed = packed_linear_weight(self, self.weight)
            if packed is not None:
                return packed.matmul(x, self.bias)
        return F.linear(x, self.weight, self.bias)


class SwiGLU(nn.Module):
    """silu(gate) * up, then down; gate and up share one fused matmul."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)
        self.intermediate_size = intermediate_size

    def forward(self, x: Tensor) -> Tensor:
        gate_up = self.gate_up_proj(x)  # bf16, or float32 from a packed copy that gives it
        ops = fused_ops(x)
        if ops is not None and _kernel_rows(gate_up) and self.intermediate_size % 16 == 0:
            return self.down_proj(ops.silu_mul(gate_up))
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up).to(x.dtype))
