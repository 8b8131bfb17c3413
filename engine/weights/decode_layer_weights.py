"""The flat list of per-layer tensors that cpu_kernels/decode_layers.cpp walks.

The kernel runs every layer of a decode step in one call; it takes each layer's norms, the
optional qkv bias and, for each of the four linears, the torch-int4 copy (for 1-2 rows)
and the AMX-block copy (3-16 rows). The order here is the `Slot` enum there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cpu_kernels.amx_blocks import AmxQ4
from cpu_kernels.quant_blocks import PackedInt4
from engine.model import LINEARS, LlamaModel


@dataclass
class DecodeLayerWeights:
    tensors: list[Tensor]
    int4_rows: int  # rows up to which the int4 copies serve, as in the Python path
    max_rows: int   # rows up to which the AMX copies serve: above, the Python path runs

    @classmethod
    def of(cls, model: LlamaModel) -> DecodeLayerWeights | None:
        """None unless every linear has exactly (int4, AMX Q4) copies with shared limits and
        the sizes suit the kernels (hidden and MLP widths in 16s, head_dim in 32s)."""
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
                copies = layer.get_submodule(name).decode_copies
                if (len(copies) != 2 or not isinstance(copies[0].weight, PackedInt4)
                        or not isinstance(copies[1].weight, AmxQ4)):
                    return None
                int4, amx = copies[0].weight, copies[1].weight
                limits.add((copies[0].max_rows, copies[1].max_rows))
                tensors += [int4.packed, int4.scales_and_zeros, amx.codes, amx.scales,
                            amx.offsets]
        if len(limits) != 1:
            return None
        int4_rows, max_rows = limits.pop()
        return cls(tensors, int4_rows, max_rows)
