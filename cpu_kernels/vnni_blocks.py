"""GGUF's Q4/Q8 codes repacked for the AVX-512 VNNI decode kernel (cpu_kernels/vnni_matmul.cpp).

The kernel multiplies 1-16 bf16 rows by a weight kept as its quantisation codes, reading the
codes once per step for all rows. Blocks of 16 output columns x 32 inputs (one group), a
column block's groups one after another; inside a block, 8 quads of 4 inputs x 16 columns in
vpdpbusd's order (byte 4c + i: column c, input i), then fp16 scales:

    Q4 block (320 bytes): 4 x 64 bytes (byte j of the p-th: byte j of quad 2p in the low
                          nibble, of quad 2p + 1 in the high), d[16], m[16]
                          w = d * q + m, q in 0..15
    Q8 block (544 bytes): 8 x 64 bytes of q + 128, d[16]   w = d * q, q in -128..127

Q4_0 and Q4_1 both become (d, m): Q4Blocks' w = (q - 8) * scale + zero is d = scale,
m = zero - 8 * scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cpu_kernels.build import kernels
from cpu_kernels.quant_blocks import GROUP, Q4Blocks, Q8Blocks

COLS = 16  # output columns per block
MAX_ROWS = 16  # rows of x the kernel takes


def fits(rows: int, cols: int) -> bool:
    """Whether a weight of `rows` outputs x `cols` inputs has the kernel's shape."""
    return rows % COLS == 0 and cols % GROUP == 0


def _quads(codes: np.ndarray) -> np.ndarray:
    """[N, K] codes -> [N/16, K/32, 8, 64] in vpdpbusd's order (quad j, byte 4c + i)."""
    n, k = codes.shape
    return (codes.reshape(n // COLS, COLS, k // GROUP, GROUP // 4, 4)
            .transpose(0, 2, 3, 1, 4).reshape(n // COLS, k // GROUP, GROUP // 4, 4 * COLS))


def _per_block(values: np.ndarray) -> np.ndarray:
    """Per-group values [N, K/32] -> fp16 bytes [N/16, K/32, 32] (16 columns of a block)."""
    n, groups = values.shape
    half = values.astype(np.float16).reshape(n // COLS, COLS, groups).transpose(0, 2, 1)
    return np.ascontiguousarray(half).view(np.uint8)


@dataclass
class VnniWeight:
    """A weight in VNNI blocks; `matmul(x)` = x @ W.T for 1-16 bf16 rows (bf16, or float32
    with `float_out`)."""

    blocks: Tensor
    outputs: int
    q4: bool  # Q4 blocks (codes, d, m) or Q8 blocks (codes + 128, d)
    float_out: bool = False  # results in float32 (the LM head's logits), not bf16

    @classmethod
    def from_q4(cls, q4: Q4Blocks) -> VnniWeight:
        n, k = q4.codes.shape
        quads = _quads(q4.codes.astype(np.uint8))
        packed = (quads[:, :, 0::2] | (quads[:, :, 1::2] << 4)).reshape(n // COLS, k // GROUP, -1)
        offset = q4.zero - 8 * q4.scale
        return cls._join([packed, _per_block(q4.scale), _per_block(offset)], n, q4=True)

    @classmethod
    def from_q8(cls, q8: Q8Blocks) -> VnniWeight:
        n, k = q8.codes.shape
        shifted = (q8.codes.astype(np.int16) + 128).astype(np.uint8)
        quads = _quads(shifted).reshape(n // COLS, k // GROUP, -1)
        return cls._join([quads, _per_block(q8.scale)], n, q4=False)

    @classmethod
    def from_blocks(cls, blocks: Q4Blocks | Q8Blocks) -> VnniWeight:
        return cls.from_q8(blocks) if isinstance(blocks, Q8Blocks) else cls.from_q4(blocks)

    @classmethod
    def _join(cls, parts: list[np.ndarray], outputs: int, q4: bool) -> VnniWeight:
        block = np.ascontiguousarray(np.concatenate(parts, axis=-1)).reshape(-1)
        return cls(torch.from_numpy(block), outputs, q4)

    def matmul(self, x: Tensor) -> Tensor:
        ops = kernels()
        kernel = ops.q4_vnni_matmul if self.q4 else ops.q8_vnni_matmul
        return kernel(x, self.blocks, self.outputs, self.float_out)
