"""Few-row matmul kernels on the real model's weights: what engine/weights/decode_copies.py
decides from.

    python -m bench.engine.kernel_bench [--rows 1,2,4,8,16] [--repeats 7] [--flush-mb 64]

For each row count: milliseconds for one step's linears over all layers, and for the LM
head, by every kernel that can serve them: oneDNN-prepacked dense bf16, torch's int4
kernel (Q4 layers) or per-row int8 (head), the AMX or VNNI blocks of cpu_kernels/, and the
int8 copies (x quantised per row; engine/weights/int8.py) where the loader made them. Median of
`--repeats`; before each timed call a buffer of `--flush-mb` is rewritten so the weights
come from memory as they do between decode steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from cpu_kernels import kernels
from cpu_kernels.quant_blocks import PackedInt8
from engine.onednn_weight import PackedBf16
from engine.weights import load_model

LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def timed(run: Callable[[], object], repeats: int, flush: torch.Tensor) -> float:
    """Median milliseconds of `run()`, each call after rewriting `flush`."""
    times = []
    for _ in range(repeats):
        flush.add_(1.0)
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def layer_kernels(model) -> dict[str, list]:
    """Kernel name -> one (matmul, in_features) per linear of every layer."""
    out: dict[str, list] = {"bf16 dense": []}
    for layer in model.layers:
        for name in LINEARS:
            linear = layer.get_submodule(name)
            out["bf16 dense"].append((PackedBf16.from_dense(linear.weight.detach()).matmul,
                                      linear.in_features))
            if linear.int8_weight is not None:
                out.setdefault("int8 W8A8", []).append((linear.int8_weight.matmul,
                                                        linear.in_features))
            for copy in linear.decode_copies:
                label = {"PackedInt4": "torch int4", "AmxQ4": "AMX blocks",
                         "VnniWeight": "VNNI blocks"}.get(type(copy.weight).__name__,
                                                          type(copy.weight).__name__)
                out.setdefault(label, []).append((copy.weight.matmul, linear.in_features))
    return out


def head_kernels(model) -> dict[str, Callable]:
    dense = model.lm_head_weight.detach()
    out = {"bf16 dense": PackedBf16.from_dense(dense).matmul,
           "int8 per row": PackedInt8.from_dense(dense).matmul}
    for copy in model.lm_head_copies:
        out.setdefault(f"{type(copy.weight).__name__} (engine's)", copy.weight.matmul)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.kernel_bench", description=__doc__)
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--flush-mb", type=int, default=64)
    args = p.parse_args(argv)
    model, _, config = load_model(dtype=torch.bfloat16, device="cpu")
    print(f"[kernel_bench] compiled kernels: {'yes' if kernels() else 'no'}; "
          f"{torch.get_num_threads()} threads")
    flush = torch.zeros(args.flush_mb * 2**20 // 4)
    rows = [int(r) for r in args.rows.split(",")]
    layers, head = layer_kernels(model), head_kernels(model)
    print("| kernel (ms) | " + " | ".join(f"{r} rows" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    with torch.inference_mode():
        for name, linears in layers.items():
            cells = []
            for r in rows:
                xs = {k: torch.randn(r, k, dtype=torch.bfloat16) for _, k in linears}
                cells.append(timed(lambda: [mm(xs[k]) for mm, k in linears],  # noqa: B023
                                   args.repeats, flush))
            print(f"| layers: {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
        for name, mm in head.items():
            cells = []
            for r in rows:
                x = torch.randn(r, config.hidden_size, dtype=torch.bfloat16)
                cells.append(timed(lambda: mm(x), args.repeats, flush))  # noqa: B023
            print(f"| LM head: {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
