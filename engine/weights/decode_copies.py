"""Which packed copies of a quantised weight serve decode steps of how many rows.

`python -m bench.engine.kernel_bench` (SmolLM2-135M's own weights, 2 threads, caches flushed
before each call; ms for one step's linears over all 30 layers, and for the LM head):

    rows                   1     2     4     8     16
    layers: bf16 dense   26.2  26.1  26.8  25.7  26.2
    layers: torch int4    6.6   8.0  10.5  19.1  34.7
    layers: AMX blocks    8.5   8.4   9.3  10.5  13.2
    head: bf16 dense      4.5   4.3   4.5   4.2   3.9
    head: int8 per row    2.5   2.2   2.8   6.6  10.9
    head: AMX Q8 blocks   2.2   2.1   2.2   2.3   2.5

torch's int4 kernel wins at 1-2 rows (also inside whole decode steps); the AMX block
kernel (codes read once, one tile product for all rows) from 3 to 16; dense bf16 above,
where prefill chunks live. The LM head keeps its exact Q8_0 codes on AMX at every row count.

Without AMX, the AVX-512 VNNI block kernel (cpu_kernels/vnni_matmul.cpp: codes read once
for all rows, each row's groups quantised to int8) serves 1 to 16 rows, layers and LM head
(2026-11-26, one thread of an AMD EPYC with AVX-512 VNNI, ms for the 30 layers' linears):

    rows                   1     2     4     8     16
    layers: VNNI blocks   3.6   4.0   4.6   6.5   12.1
    layers: torch int4    6.6   8.0  11.1  21.5   41.3
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from cpu_kernels import amx_kernels, kernels
from cpu_kernels.amx_blocks import AmxQ4, AmxQ8, fits
from cpu_kernels.quant_blocks import PackedInt4, PackedInt8, Q4Blocks, Q8Blocks
from cpu_kernels.vnni_blocks import MAX_ROWS as VNNI_MAX_ROWS
from cpu_kernels.vnni_blocks import VnniWeight
from cpu_kernels.vnni_blocks import fits as vnni_fits
from engine.layers import DecodeCopy
from engine.model import FLOAT_OUTPUTS, LlamaModel
from engine.weights.decode_layer_weights import DecodeLayerWeights

INT4_MAX_ROWS_BESIDE_AMX = 2
AMX_MAX_ROWS = 16
# Steps of 17-48 rows (short prefill chunks: a new turn behind a cached prefix) run the VNNI
# kernel on even slices of at most 16 rows: its codes read per slice still beat the int8
# copies' torch._int_mm, which pays ~0.3 ms a call at these sizes. A whole step prefilling
# n tokens, one thread (2026-11-27, AMD EPYC without AMX), int8 copies vs VNNI slices:
# n = 17: 32.4 vs 21.1 ms, 32: 42.3 vs 33.1, 48: 51.1 vs 47.1, 64: 63.9 vs 61.7 and 61.0 vs
# 61.1 in a second run (a tie); behind 1,024 cached tokens, 32: 69.2 vs 63.4.
VNNI_SLICED_MAX_ROWS = 48
# Without the AMX kernel: at 4 rows torch's int4 kernel costs what bf16 does with the
# weights hot in cache (303 vs 301 us per layer) while reading a quarter of the bytes
# (batch-4 steps under load: 212 vs 438 ms); at 8 rows ~1.8x bf16's hot time.
INT4_MAX_ROWS = 4


def vnni_available() -> bool:
    """Whether the AVX-512 VNNI block kernel runs here (the avx512 kernel variant)."""
    module = kernels()
    return module is not None and module.variant == "avx512" and hasattr(module, "q4_vnni_matmul")


def linear_copies(blocks: Q4Blocks | Q8Blocks) -> tuple[DecodeCopy, ...]:
    """The copies a linear layer keeps for its decode steps, fastest first."""
    rows, cols = blocks.codes.shape
    if vnni_available() and vnni_fits(rows, cols):
        return (DecodeCopy(VNNI_MAX_ROWS, VnniWeight.from_blocks(blocks), VNNI_SLICED_MAX_ROWS),)
    amx = amx_kernels() is not None and fits(rows, cols)
    if isinstance(blocks, Q8Blocks):
        return (DecodeCopy(AMX_MAX_ROWS, AmxQ8.from_codes(blocks.codes, blocks.scale)),) if amx else ()
    int4 = PackedInt4.from_blocks(blocks)
    if not amx:
        return (DecodeCopy(INT4_MAX_ROWS, int4),)
    return (DecodeCopy(INT4_MAX_ROWS_BESIDE_AMX, int4),
            DecodeCopy(AMX_MAX_ROWS, AmxQ4.from_blocks(blocks)))


def lm_head_copies(blocks: Q4Blocks | Q8Blocks | None, dense: Tensor) -> tuple[DecodeCopy, ...]:
    """The LM head's: its own quantised blocks through AMX or VNNI, else int8 rows for 1-row
    steps. The AMX and VNNI blocks hand their logits over in float32: rounded to bf16, two
    tokens 0.1 apart at a logit of 25 (SmolLM2's answer to "What is the capital of France?":
    "The" against "L'Étoile") come out equal, and the tie goes to the lower token id."""
    if blocks is not None and (amx_kernels() is not None or vnni_available()):
        copies = linear_copies(blocks)
        if copies:
            return float_results(copies)
    return (DecodeCopy(1, PackedInt8.from_dense(dense)),)


def float_results(copies: tuple[DecodeCopy, ...]) -> tuple[DecodeCopy, ...]:
    """The same copies, those whose kernel can hand its results over in float32 doing so
    (the AMX and VNNI blocks; torch's int4 and int8 kernels give bf16)."""
    return tuple(replace(c, weight=replace(c.weight, float_out=True))
                 if hasattr(c.weight, "float_out") else c for c in copies)


# the model's fused linears and the checkpoint's weights each is made of
FUSED_SOURCES = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 "self_attn.o_proj": ("self_attn.o_proj",),
                 "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
                 "mlp.down_proj": ("mlp.down_proj",)}


def attach_decode_copies(model: LlamaModel, blocks: dict[str, Q4Blocks | Q8Blocks]) -> int:
    """Give few-row steps packed copies of the quantised weights (and of the LM head), and
    the one-call decode kernel its flat list where every linear has the AMX copies. The
    linears of `FLOAT_OUTPUTS` and the LM head get float32 results where their kernel gives
    them.

    `blocks` maps Hugging Face names to unpacked Q4/Q8 tensors. Returns the count of
    linears given copies.
    """
    count = 0
    for i, layer in enumerate(model.layers):
        for target, sources in FUSED_SOURCES.items():
            parts = [blocks.get(f"model.layers.{i}.{name}.weight") for name in sources]
            kinds = {type(p) for p in parts}
            if len(kinds) != 1 or kinds.pop() not in (Q4Blocks, Q8Blocks):
                continue
            copies = linear_copies(type(parts[0]).concat(parts))
            if target in FLOAT_OUTPUTS:
                copies = float_results(copies)
            if copies:
                layer.get_submodule(target).decode_copies = copies
                count += 1
    head = blocks.get("model.embed_tokens.weight" if model.lm_head is None else "lm_head.weight")
    model.lm_head_copies = lm_head_copies(head, model.lm_head_weight.detach())
    model.decode_weights = DecodeLayerWeights.of(model)
    return count
