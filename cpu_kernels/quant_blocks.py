"""Packed low-bit copies of weights for single-token decode steps on the CPU.

A decode step at batch 1 multiplies one row by every weight, so it is bound by reading
weights from memory. Q4_0/Q4_1 GGUF tensors repack exactly into torch's int4 format
(group size 32: w = (q - 8) * scale + zero), which reads ~4x fewer bytes than bf16;
the LM head gets int8 per-row scales. Steps with more rows keep the dense weights,
where these kernels are slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np
import torch
from torch import Tensor

GROUP = 32
_Q4_LAYOUT = {gguf.GGMLQuantizationType.Q4_0: 18, gguf.GGMLQuantizationType.Q4_1: 20}


@dataclass
class Q4Blocks:
    """A Q4 tensor unpacked: 4-bit codes [N, K], per-32-column scale and zero [N, K/32]."""

    codes: np.ndarray
    scale: np.ndarray
    zero: np.ndarray

    @staticmethod
    def concat(parts: list[Q4Blocks]) -> Q4Blocks:
        return Q4Blocks(*(np.concatenate([getattr(p, f) for p in parts])
                          for f in ("codes", "scale", "zero")))

    def dequantize(self) -> np.ndarray:
        rows, cols = self.codes.shape
        codes = self.codes.reshape(rows, cols // GROUP, GROUP).astype(np.float32) - 8
        return (codes * self.scale[..., None] + self.zero[..., None]).reshape(rows, cols)


def unpack_q4(data: np.ndarray, qtype: gguf.GGMLQuantizationType) -> Q4Blocks | None:
    """Codes/scales of a Q4_0 or Q4_1 tensor's raw bytes [N, K/32 * block]; None otherwise."""
    if qtype not in _Q4_LAYOUT:
        return None
    rows = data.shape[0]
    blocks = np.ascontiguousarray(data).reshape(rows, -1, _Q4_LAYOUT[qtype])
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if qtype == gguf.GGMLQuantizationType.Q4_1:  # w = d * q + m
        m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        qs = blocks[..., 4:]
    else:  # Q4_0: w = d * (q - 8)
        m, qs = -8 * d, blocks[..., 2:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(rows, -1)
    return Q4Blocks(codes, d, m + 8 * d)


@dataclass
class Q8Blocks:
    """A Q8_0 tensor unpacked: int8 codes [N, K], per-32-column scale [N, K/32]; w = q * scale."""

    codes: np.ndarray
    scale: np.ndarray

    @staticmethod
    def concat(parts: list[Q8Blocks]) -> Q8Blocks:
        return Q8Blocks(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("codes", "scale")))

    def dequantize(self) -> np.ndarray:
        rows, cols = self.codes.shape
        codes = self.codes.reshape(rows, cols // GROUP, GROUP).astype(np.float32)
        return (codes * self.scale[..., None]).reshape(rows, cols)


def unpack_q8(data: np.ndarray, qtype: gguf.GGMLQuantizationType) -> Q8Blocks | None:
    """Codes/scales of a Q8_0 tensor's raw bytes [N, K/32 * 34]; None for other types."""
    if qtype != gguf.GGMLQuantizationType.Q8_0:
        return None
    rows = data.shape[0]
    blocks = np.ascontiguousarray(data).reshape(rows, -1, 34)
    scale = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    codes = blocks[..., 2:].copy().view(np.int8).reshape(rows, -1)
    return Q8Blocks(codes, scale)


@dataclass
class PackedInt4:
    """torch's CPU int4 layout; `matmul(x)` = x @ W.T for bf16 x."""

    packed: Tensor
    scales_and_zeros: Tensor  # [K/32, N, 2] bf16

    @classmethod
    def from_blocks(cls, blocks: Q4Blocks) -> PackedInt4:
        codes = torch.from_numpy(blocks.codes.astype(np.int32))
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        sz = np.stack([blocks.scale.T, blocks.zero.T], axis=-1)
        return cls(packed, torch.from_numpy(sz).to(torch.bfloat16).contiguous())

    def matmul(self, x: Tensor) -> Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP,
                                                          self.scales_and_zeros)


@dataclass
class PackedInt8:
    """int8 rows with one bf16 scale each; `matmul(x)` = x @ W.T for bf16 x."""

    weight: Tensor
    scales: Tensor

    @classmethod
    def from_dense(cls, w: Tensor) -> PackedInt8:
        w = w.float()
        scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scales.to(torch.bfloat16))

    def matmul(self, x: Tensor) -> Tensor:
        return torch._weight_int8pack_mm(x, self.weight, self.scales)


def packed_kernels_available() -> bool:
    """True when this torch build has the CPU int4/int8 weight-only kernels."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch, "_weight_int8pack_mm")
