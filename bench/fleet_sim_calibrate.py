"""Measure the bundled engine's step costs for the fleet simulator (`StepCosts`).

    flock /tmp/headstart-bench.lock python -m bench.fleet_sim_calibrate [--threads 1]

Runs `LLMEngine` in this process with one torch thread (as each live replica runs) and
times single steps: a prefill of N uncached tokens (N = 32 … 512, and 64 new tokens behind
1,024 cached ones, to see whether the context matters), and decode steps of k = 1 … 16
requests. A least-squares line through each gives the step's fixed cost, the cost per
prefill token and per decoding request. Medians of `--repeats` steps; the machine is
shared, so run it twice and compare.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from engine import EngineConfig, LLMEngine, SamplingParams


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = (sum((x - mx) * (y - my) for x, y in points)
             / sum((x - mx) ** 2 for x, _ in points))
    return my - slope * mx, slope


def _timed_step(engine: LLMEngine) -> float:
    t0 = time.perf_counter()
    engine.step()
    return time.perf_counter() - t0


def measure(repeats: int = 7, seed: int = 0) -> dict:
    rng = random.Random(seed)
    engine = LLMEngine(EngineConfig(num_kv_blocks=2048, max_num_batched_tokens=512))
    vocab = engine.model_config.vocab_size

    def ids(n: int) -> list[int]:
        return [rng.randrange(100, vocab) for _ in range(n)]

    one = SamplingParams(max_tokens=1, temperature=0)
    engine.generate([ids(64)], one)  # warm-up: first calls allocate and pick kernels
    prefill = []
    for n in (32, 64, 128, 256, 384, 512):
        times = []
        for _ in range(repeats):
            engine.add_request(ids(n), one)
            times.append(_timed_step(engine))
            while engine.has_unfinished():
                engine.step()
        prefill.append((n, statistics.median(times)))
    context = []
    for _ in range(repeats):
        shared = ids(1024)
        engine.generate([shared], one)
        engine.add_request(shared + ids(64), one)
        context.append(_timed_step(engine))
        while engine.has_unfinished():
            engine.step()
    decode = []
    for k in (1, 2, 4, 8, 16):
        long = SamplingParams(max_tokens=repeats + 3, temperature=0, ignore_eos=True)
        for _ in range(k):
            engine.add_request(ids(16), long)
        engine.step()  # their prefills
        times = [_timed_step(engine) for _ in range(repeats)]
        while engine.has_unfinished():
            engine.step()
        decode.append((k, statistics.median(times)))
    p0, per_token = _fit(prefill)
    d0, per_seq = _fit(decode)
    return {"step_s": round(d0, 5), "prefill_token_s": round(per_token, 7),
            "decode_seq_s": round(per_seq, 6), "prefill_intercept_s": round(p0, 5),
            "prefill_64_after_1024_cached_s": round(statistics.median(context), 5),
            "prefill_points": prefill, "decode_points": decode}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", help="write the measurement as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure(args.repeats)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
