"""The prefill attention kernel alone (cpu_kernels/prefill_attention.cpp) against torch's
SDPA, on a model's attention shapes: GFLOP/s a thread.

    python -m bench.engine.attention_bench [--shapes 512:0,512:1536,2048:0] [--repeats 5]
        [--heads 9 --kv-heads 3 --head-dim 64]

A shape `L:start` is one prefill chunk of L queries at positions start..start+L-1 over the
keys of positions 0..start+L-1 (causal), as the engine's chunked prefill runs it (the
default sizes are SmolLM2-135M's). Both take the same bf16 q, k, v; the kernel also writes
K/V into a paged cache, SDPA gets the context as one tensor (what it would be given after a
gather). Timed in CPU seconds of this process (`time.process_time`), best of `--repeats`,
so other processes on a shared machine slow the figures less than wall time would; the
FLOP count is 4 * head_dim * (visible keys) per query head (q.k and p.v, causal).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from cpu_kernels import kernels

BLOCK = 16


def causal_flops(length: int, start: int, heads: int, head_dim: int) -> float:
    keys = sum(start + i + 1 for i in range(length))
    return 4.0 * head_dim * heads * keys


def best_cpu_seconds(run: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def inputs(length: int, start: int, heads: int, kv_heads: int, head_dim: int, seed: int = 0):
    """(q, k, v of the chunk, the whole context's k and v, a paged cache holding the context
    before the chunk, slots, block table)."""
    g = torch.Generator().manual_seed(seed)
    ctx = start + length
    keys = torch.randn(ctx, kv_heads, head_dim, generator=g).bfloat16()
    values = torch.randn(ctx, kv_heads, head_dim, generator=g).bfloat16()
    q = torch.randn(length, heads, head_dim, generator=g).bfloat16()
    blocks = -(-ctx // BLOCK)
    table = torch.randperm(blocks, generator=g) + 1  # scattered blocks, as a real cache has
    cache = torch.zeros(2, blocks + 1, BLOCK, kv_heads, head_dim, dtype=torch.bfloat16)
    pos = torch.arange(ctx)
    slots = table[pos // BLOCK] * BLOCK + pos % BLOCK
    flat = cache.view(2, -1, kv_heads, head_dim)
    flat[0, slots[:start]] = keys[:start]
    flat[1, slots[:start]] = values[:start]
    return q, keys[start:], values[start:], keys, values, cache, slots[start:].contiguous(), table


def time_shape(module, length: int, start: int, heads: int, kv_heads: int, head_dim: int,
               repeats: int) -> tuple[float, float]:
    """(kernel, SDPA) best CPU seconds for one chunk."""
    q, k, v, keys, values, cache, slots, table = inputs(length, start, heads, kv_heads, head_dim)
    scale, group = head_dim ** -0.5, heads // kv_heads
    kernel = best_cpu_seconds(
        lambda: module.paged_prefill_attention(q, k, v, cache, slots, table, start, scale),
        repeats)
    qs = q.transpose(0, 1)[None]
    ks = keys.repeat_interleave(group, 1).transpose(0, 1)[None]
    vs = values.repeat_interleave(group, 1).transpose(0, 1)[None]
    mask = torch.arange(start + length)[None, :] <= torch.arange(start, start + length)[:, None]
    sdpa = best_cpu_seconds(
        lambda: F.scaled_dot_product_attention(qs, ks, vs, attn_mask=None if start == 0 else mask,
                                               is_causal=start == 0, scale=scale), repeats)
    return kernel, sdpa


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.attention_bench", description=__doc__)
    p.add_argument("--shapes", default="512:0,512:1536,2048:0")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    module = kernels()
    if module is None:
        print("[attention_bench] no compiled kernels here (make install)")
        return 1
    print(f"[attention_bench] {module.variant} kernels, {args.threads} thread(s), CPU time")
    print("| chunk | kernel ms | kernel GFLOP/s a thread | SDPA ms | SDPA GFLOP/s a thread |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for shape in args.shapes.split(","):
            length, start = (int(x) for x in shape.split(":"))
            kernel, sdpa = time_shape(module, length, start, args.heads, args.kv_heads,
                                      args.head_dim, args.repeats)
            flops = causal_flops(length, start, args.heads, args.head_dim)
            # CPU seconds of all threads: flops over them is the rate of one thread
            print(f"| {length} from {start} | {kernel * 1e3:.1f} | {flops / kernel / 1e9:.0f} | "
                  f"{sdpa * 1e3:.1f} | {flops / sdpa / 1e9:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
