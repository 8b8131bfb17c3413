"""Q4_1 / Q8_0 weights rearranged into AMX tile blocks for cpu_kernels/group_quant_matmul.cpp.

A block is 16 output columns x 32 inputs (one quantisation group per column), stored as
the 16 rows of an AMX bf16 "B" tile: row r holds (W[n][2r], W[n][2r+1]) for n = 0..15.
Q4 codes of rows 2i and 2i+1 share bytes (low and high nibble). Scales and offsets are
[N/16, K/32, 16] float32 so that the kernel loads one block's 16 with one instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cpu_kernels.build import amx_kernels
from cpu_kernels.quant_blocks import GROUP, Q4Blocks

COLS = 16  # output columns per block


def tile_rows(codes: np.ndarray) -> np.ndarray:
    """[N, K] codes -> [N/16, K/32, 16 rows, 32] in B-tile order (pairs of inputs per column)."""
    n, k = codes.shape
    blocks = codes.reshape(n // COLS, COLS, k // GROUP, GROUP // 2, 2)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 1, 4)).reshape(
        n // COLS, k // GROUP, GROUP // 2, 2 * COLS)


def per_block(values: np.ndarray) -> Tensor:
    """[N, K/32] per-group values -> float32 [N/16, K/32, 16]."""
    n, groups = values.shape
    blocks = values.reshape(n // COLS, COLS, groups).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(blocks, dtype=np.float32))


def fits(n: int, k: int) -> bool:
    return n % COLS == 0 and k % GROUP == 0


def pack_q4_codes(codes: np.ndarray) -> Tensor:
    """[N, K] 4-bit codes -> uint8 [N/16, K/32, 8, 32]: tile rows 2i (low nibble) and 2i+1."""
    rows = tile_rows(codes.astype(np.uint8))
    return torch.from_numpy(np.ascontiguousarray(rows[:, :, 0::2] | (rows[:, :, 1::2] << 4)))


@dataclass
class AmxQ4:
    """A Q4_1 weight for the AMX kernel; `matmul(x)` = x @ W.T for 1-16 bf16 rows."""

    codes: Tensor    # uint8 [N/16, K/32, 8, 32]: tile rows 2i | 2i+1 << 4
    scales: Tensor   # float32 [N/16, K/32, 16]
    offsets: Tensor  # min - 128 * scale: the kernel's codes are the bf16 of 128 + q
    kernel: Any      # the compiled q4_matmul
    float_out: bool = False  # results in float32 (the LM head's logits), not bf16

    @classmethod
    def from_blocks(cls, blocks: Q4Blocks, module: ModuleType | None = None) -> AmxQ4:
        # Q4Blocks: w = (q - 8) * scale + zero = q * scale + (zero - 8 * scale)
        minimum = blocks.zero - 8 * blocks.scale
        return cls(pack_q4_codes(blocks.codes), per_block(blocks.scale),
                   per_block(minimum - 128 * blocks.scale), (module or amx_kernels()).q4_matmul)

    def matmul(self, x: Tensor) -> Tensor:
        return self.kernel(x, self.codes, self.scales, self.offsets, self.float_out)


@dataclass
class AmxQ8:
    """A Q8_0 weight (w = q * scale, 32-wide groups) for the AMX kernel."""

    codes: Tensor   # int8 [N/16, K/32, 16, 32]
    scales: Tensor  # float32 [N/16, K/32, 16]
    kernel: Any     # the compiled q8_matmul
    float_out: bool = False  # results in float32 (the LM head's logits), not bf16

    @classmethod
    def from_codes(cls, codes: np.ndarray, scales: np.ndarray,
                   module: ModuleType | None = None) -> AmxQ8:
        """codes int8 [N, K], scales [N, K/32]."""
        return cls(torch.from_numpy(tile_rows(codes.astype(np.int8))), per_block(scales),
                   (module or amx_kernels()).q8_matmul)

    def matmul(self, x: Tensor) -> Tensor:
        return self.kernel(x, self.codes, self.scales, self.float_out)
