"""int8 copies of the weights for steps of many rows (prefill chunks, decode batches) on
CPUs whose compiled kernels include cpu_kernels/int8_linear.cpp.

Each output channel keeps one float scale (max |w| / 127) and every row of x is quantised
on the fly with its own (per-token) scale, so a matmul runs on int8 products: twice bf16's
rate with AVX-512 VNNI. A few input channels carry outliers that crush the others'
resolution under per-token scales. SmoothQuant (Xiao et al., 2023) moves them into the
weights: each input channel j is divided by s_j = sqrt(max|x_j| / max|W_j|) in x and
multiplied by it in W, with max|x_j| measured once at load on a short built-in text
(`CALIBRATION_TEXT`). Simulated on the fixed English text of bench/engine/int8_quality.py,
quantising the activations alone costs +4.1% perplexity without smoothing and +1.4% with
it, the smoothed weights alone +1.1%: smoothing halves an outlier, keeps some of it in x
and moves the rest into W, where it coarsens that weight row's scale. So the
`OUTLIER_CHANNELS` inputs with the largest calibration maxima skip the int8 product
altogether (LLM.int8()'s decomposition with the channels chosen once): their weights stay
in float and the kernel adds them while scaling. Eight of 576 or 1,536 channels cost ~3% of
the int8 matmuls' time and bring the text from +2.6% to +1.7% above float32
(tests/engine/test_int8.py checks a slice). The LM head keeps its bf16 and per-row int8
copies: quantising its input costs another 1.3%.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor, nn

from cpu_kernels import PackedW8A8
from engine.attention import AttentionMetadata
from engine.model import LINEARS, LlamaModel

OUTPUT_MULTIPLE = 16  # the kernel scales 16 outputs at a time
OUTLIER_CHANNELS = 8  # inputs kept in float; of 0, 4, 8, 16, 32 on two texts, 8 was best
# Measured on for the smoothing factors; any ordinary text shows the same outlier channels.
CALIBRATION_TEXT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Summarise the water cycle in two sentences, then write a Python function that returns "
    "the sum of the squares of a list of numbers.<|im_end|>\n<|im_start|>assistant\n"
    "Water evaporates from seas and lakes, rises, cools into clouds and falls again as rain "
    "or snow, which rivers carry back to the sea. The cycle is driven by the sun's heat.\n\n"
    "def sum_of_squares(values):\n    return sum(v * v for v in values)\n<|im_end|>\n"
    "The committee met on 12 March 2024 in Geneva; 47 members voted, 31 in favour."
)


@torch.inference_mode()
def input_maxima(model: LlamaModel, ids: list[int], block_size: int = 16) -> dict[nn.Module, Tensor]:
    """max |x_j| of every linear's input channels over one prompt of `ids` (bf16 matmuls)."""
    seen: dict[nn.Module, Tensor] = {}

    def record(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        top = args[0].float().abs().amax(dim=0)
        seen[module] = top if module not in seen else torch.maximum(seen[module], top)

    linears = [layer.get_submodule(name) for layer in model.layers for name in LINEARS]
    hooks = [linear.register_forward_pre_hook(record) for linear in linears]
    try:
        c, n = model.config, len(ids)
        blocks = -(-n // block_size)
        kv = torch.zeros(c.num_layers, 2, blocks, block_size, c.num_kv_heads, c.head_dim,
                         dtype=model.dtype, device=model.device)
        pos = torch.arange(n, device=model.device)
        table = torch.arange(blocks, device=model.device)
        meta = AttentionMetadata(pos, [0, n], [n], table[None])
        model(torch.tensor(ids, device=model.device), pos, meta, kv)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def attach_int8_weights(model: LlamaModel, module: ModuleType, calibration: list[int]) -> int:
    """Give every linear of a bf16 CPU model its smoothed int8 copy, with the smoothing
    measured on the token ids `calibration`; returns how many linears got one."""
    maxima = input_maxima(model, calibration)
    count = 0
    for layer in model.layers:
        for name in LINEARS:
            linear = layer.get_submodule(name)
            if linear.out_features % OUTPUT_MULTIPLE == 0:
                linear.int8_weight = PackedW8A8.from_dense(
                    linear.weight, module, maxima.get(linear), OUTLIER_CHANNELS)
                count += 1
    return count
