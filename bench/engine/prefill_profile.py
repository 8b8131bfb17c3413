"""Where a cold prefill's time goes: shares of matmuls, attention, elementwise ops and Python.

    python -m bench.engine.prefill_profile [--tokens 512,2048] [--repeats 3]

Runs the engine's model (the default GGUF, bf16 where the CPU has it, 2 threads) over fresh
prompts of random token ids under torch's profiler and sorts every operator's own time into
four kinds; "Python" is the wall time no operator accounts for (interpreter, module calls,
plan building). The compiled kernels are not torch operators, so each of their functions is
timed under its own `record_function` label. Prints one Markdown table: ms and share per kind.
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections.abc import Callable
from types import ModuleType

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from cpu_kernels import kernels
from engine.attention import AttentionMetadata
from engine.weights import load_model

KINDS = ("matmuls", "attention", "elementwise", "Python")
MATMUL_OPS = ("mm", "addmm", "bmm", "linear", "matmul", "_int_mm", "_linear_pointwise",
              "_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu", "int8_linear",
              "q4_matmul", "q8_matmul", "mkldnn_linear")
ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "index_copy", "index_select",
                 "paged_decode_attention", "prefill_attention", "_softmax", "baddbmm")


def kind_of(op: str) -> str:
    """The kind an operator's own time counts as (its name without namespace)."""
    name = op.split("::")[-1]
    if any(name == m or name.startswith(m) for m in MATMUL_OPS):
        return "matmuls"
    if any(a in name for a in ATTENTION_OPS):
        return "attention"
    return "elementwise"


def label_kernels(module: ModuleType | None) -> None:
    """Wrap every function of the compiled module in a profiler label (this process only)."""
    if module is None:
        return
    for name in dir(module):
        fn = getattr(module, name)
        if name.startswith("_") or not callable(fn):
            continue

        def labelled(*args, _fn: Callable = fn, _name: str = name, **kwargs):
            with record_function(f"headstart::{_name}"):
                return _fn(*args, **kwargs)

        functools.update_wrapper(labelled, fn)
        setattr(module, name, labelled)


def prefill(model, ids: list[int], block_size: int = 16) -> None:
    """One cold prompt through the model and the LM head of its last token."""
    c = model.config
    n = len(ids)
    blocks = -(-n // block_size)
    kv = torch.zeros(c.num_layers, 2, blocks + 1, block_size, c.num_kv_heads, c.head_dim,
                     dtype=model.dtype)
    table = torch.arange(1, blocks + 1)
    pos = torch.arange(n)
    meta = AttentionMetadata(table[pos // block_size] * block_size + pos % block_size,
                             [0, n], [n], table[None])
    with torch.inference_mode():
        hidden = model(torch.tensor(ids), pos, meta, kv)
        model.compute_logits(hidden[-1:])


def profile_prefill(model, n: int, seed: int) -> tuple[float, dict[str, float]]:
    """(wall ms, ms per kind) of one cold prefill of `n` tokens."""
    ids = [random.Random(seed).randrange(200, 40000) for _ in range(n)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        prefill(model, ids)
        wall = (time.perf_counter() - start) * 1e3
    spent = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        if event.key.startswith("headstart::"):  # a label: its time is its operators' + C++
            continue
        spent[kind_of(event.key)] += event.self_cpu_time_total / 1e3
    for event in prof.key_averages():  # the compiled functions' own time beyond their ops
        if event.key.startswith("headstart::"):
            spent[kind_of(event.key)] += event.self_cpu_time_total / 1e3
    spent["Python"] = max(0.0, wall - sum(spent[k] for k in KINDS[:3]))
    return wall, spent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.prefill_profile", description=__doc__)
    p.add_argument("--tokens", default="512,2048")
    p.add_argument("--repeats", type=int, default=3, help="profiled prompts per size (best kept)")
    args = p.parse_args(argv)
    model, _, _ = load_model()
    label_kernels(kernels())
    for linear in model.modules():  # the int8 copies hold the kernel from before the labels
        copy = getattr(linear, "int8_weight", None)
        if copy is not None:
            copy.kernel = kernels().int8_linear
    print(f"[prefill_profile] {model.cpu_path}; {torch.get_num_threads()} threads")
    prefill(model, list(range(200, 264)))  # warm up
    print("| prompt | wall ms | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for n in (int(t) for t in args.tokens.split(",")):
        runs = [profile_prefill(model, n, seed) for seed in range(args.repeats)]
        wall, spent = min(runs, key=lambda r: r[0])
        cells = " | ".join(f"{spent[k]:.0f} ({spent[k] / wall:.0%})" for k in KINDS)
        print(f"| {n} tokens | {wall:.0f} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
