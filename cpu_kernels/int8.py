"""An int8 weight for the compiled `int8_linear` kernel (int8_linear.cpp): rows as int8 with
a scale each, every row of x quantised with its own scale as it is multiplied (bfloat16 in
and out), optionally smoothed per input channel (SmoothQuant) with a few outlier channels
kept in float. The engine's linears (engine/weights/int8.py) and the cache's encoder
(cache/minilm.py) both pack their weights this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

SMOOTHING_ALPHA = 0.5  # s_j = max|x_j|^a / max|W_j|^(1-a); 0.5 measured best of 0, .5, .7, .85


@dataclass
class PackedW8A8:
    """An int8 weight with per-output-channel scales and per-input-channel smoothing;
    `matmul(x, bias)` = x @ W.T + bias for bf16 x, x quantised per row in the kernel."""

    weight_t: Tensor  # int8 [K, N]: the transposed view of a contiguous [N, K] (W * s)
    scales: Tensor    # float32 [N]
    smooth: Tensor | None  # float32 [K]: 1 / s, applied to x before quantising (0: outlier)
    kernel: Any       # the compiled int8_linear
    outlier_cols: Tensor | None = None    # int64 [k]: inputs kept out of the int8 product
    outlier_weight: Tensor | None = None  # float32 [k, N]: their rows of W.T

    @classmethod
    def from_dense(cls, w: Tensor, module: ModuleType, input_max: Tensor | None = None,
                   outliers: int = 0) -> PackedW8A8:
        """`input_max`: max |x_j| per input channel measured on real inputs (no smoothing
        without it); the `outliers` channels with the largest stay in float."""
        w = w.detach().float()
        smooth = cols = kept = None
        if input_max is not None:
            s = (input_max.float().clamp(min=1e-5) ** SMOOTHING_ALPHA
                 / w.abs().amax(dim=0).clamp(min=1e-5) ** (1 - SMOOTHING_ALPHA))
            smooth = 1 / s
            if outliers:
                cols = torch.topk(input_max.float(), outliers).indices.sort().values
                kept = w[:, cols].t().contiguous()
                s[cols], smooth[cols] = 0.0, 0.0
            w = w * s
            smooth = smooth.contiguous()
        scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        codes = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        return cls(codes.t(), scales.contiguous(), smooth, module.int8_linear, cols, kept)

    def dequantize(self) -> Tensor:
        """W as the kernel sees it, float32 [N, K] (the smoothing undone)."""
        w = self.weight_t.t().float() * self.scales[:, None]
        if self.smooth is None:
            return w
        w = w * self.smooth
        if self.outlier_cols is not None:
            w[:, self.outlier_cols] = self.outlier_weight.t()
        return w

    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        return self.kernel(x.contiguous(), self.weight_t, self.scales, bias, self.smooth,
                           self.outlier_cols, self.outlier_weight)
