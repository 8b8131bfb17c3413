"""The flat list of per-layer tensors that cpu_kernels/decode_layers.cpp walks.

The kernel runs every layer of a decode step in one call; it takes each layer's norms, the
optional qkv bias and, for each of the four linears, five slots: with AMX the torch-int4
copy (for 1-2 rows: packed codes, scales) and the AMX-block copy (3-16 rows: codes, scales,
offsets); without, the VNNI blocks in the codes' slot and the others empty. The order here
is the `Slot` enum there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cpu_kernels.amx_blocks import AmxQ4
from cpu_kernels.quant_blocks import PackedInt4
from cpu_kernels.vnni_blocks import VnniWeight
from engine.layers import DecodeCopy
from engine.model import FLOAT_OUTPUTS, LINEARS, LlamaModel


def linear_slots(copies: tuple[DecodeCopy, ...], empty: Tensor, float_out: bool
                 ) -> tuple[tuple[int, int], list[Tensor]] | None:
    """((int4 rows, most rows), the five slots) of one linear's copies; None where they are
    not what the kernel takes (its float32 outputs included: it assumes which linears)."""
    weights = [c.weight for c in copies]
    if (len(copies) == 2 and isinstance(weights[0], PackedInt4)
            and isinstance(weights[1], AmxQ4) and weights[1].float_out == float_out):
        int4, amx = weights
        return ((copies[0].max_rows, copies[1].max_rows),
                [int4.packed, int4.scales_and_zeros, amx.codes, amx.scales, amx.offsets])
    if (len(copies) == 1 and isinstance(weights[0], VnniWeight) and weights[0].q4
            and weights[0].float_out == float_out):
        return (0, copies[0].max_rows), [empty, empty, weights[0].blocks, empty, empty]
    return None


@dataclass
class DecodeLayerWeights:
    tensors: list[Tensor]
    int4_rows: int  # rows up to which the int4 copies serve, as in the Python path (0: VNNI)
    max_rows: int   # rows up to which the AMX or VNNI copies serve: above, the Python path runs

    @classmethod
    def of(cls, model: LlamaModel) -> DecodeLayerWeights | None:
        """None unless every linear has exactly (int4, AMX Q4) copies, or one VNNI Q4 copy,
        with shared limits, and the sizes suit the kernels (hidden and MLP widths in 16s,
        head_dim in 32s)."""
        c = model.config
        if c.hidden_size % 16 or c.intermediate_size % 16 or c.head_dim % 32 or c.head_dim > 256:
            return None

        tensors: list[Tensor] = []
        limits = set()
        empty = torch.empty(0, dtype=model.dtype)
        for layer in model.layers:
            bias = layer.self_attn.qkv_proj.bias
            tensors += [layer.input_layernorm.weight.detach(),
                        layer.post_attention_layernorm.weight.detach(),
                        empty if bias is None else bias.detach()]
            for name in LINEARS:
                slots = linear_slots(layer.get_submodule(name).decode_copies, empty,
                                     name in FLOAT_OUTPUTS)
                if slots is None:
                    return None
                limits.add(slots[0])
                tensors += slots[1]
        if len(limits) != 1:
            return None
        int4_rows, max_rows = limits.pop()
        return cls(tensors, int4_rows, max_rows)
