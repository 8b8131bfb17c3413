"""Which packed copies of a quantised weight serve decode steps of how many rows.

Measured here (all 30 layers of SmolLM2-135M, 2 threads, ms per step's linears):

    rows           1     2     4     8     16
    bf16 dense   16.8  17.8  17.9  19.0  20.4
    torch int4    5.0   6.2   8.4  15.7  29.2
    AMX blocks    7.1   7.1   7.4   8.3  10.5

torch's int4 kernel wins at 1-2 rows; the AMX block kernel (read the codes once, one tile
product for all rows) from 3 to 16; dense bf16 above, where prefill chunks live.
"""

from __future__ import annotations

from engine.kernels.build import kernels
from engine.layers import DecodeCopy
from engine.weights.amx_blocks import AmxQ4, AmxQ8, fits
from engine.weights.packed import PackedInt4, PackedInt8, Q4Blocks, Q8Blocks

INT4_MAX_ROWS_BESIDE_AMX = 2
INT4_MAX_ROWS = 4  # without the AMX kernel; see engine/layers.py
AMX_MAX_ROWS = 16


def linear_copies(blocks: Q4Blocks | Q8Blocks) -> tuple[DecodeCopy, ...]:
    """The copies a linear layer keeps for its decode steps, fastest first."""
    rows, cols = blocks.codes.shape
    amx = kernels() is not None and fits(rows, cols)
    if isinstance(blocks, Q8Blocks):
        return (DecodeCopy(AMX_MAX_ROWS, AmxQ8.from_codes(blocks.codes, blocks.scale)),) if amx else ()
    int4 = PackedInt4.from_blocks(blocks)
    if not amx:
        return (DecodeCopy(INT4_MAX_ROWS, int4),)
    return (DecodeCopy(INT4_MAX_ROWS_BESIDE_AMX, int4),
            DecodeCopy(AMX_MAX_ROWS, AmxQ4.from_blocks(blocks)))


def lm_head_copies(blocks: Q4Blocks | Q8Blocks | None, dense) -> tuple[DecodeCopy, ...]:
    """The LM head's: its own quantised blocks through AMX, else int8 rows for 1-row steps."""
    if blocks is not None and kernels() is not None:
        copies = linear_copies(blocks)
        if copies:
            return copies
    return (DecodeCopy(1, PackedInt8.from_dense(dense)),)
