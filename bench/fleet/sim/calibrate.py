"""Measure the bundled engine's step costs for the fleet simulator (`StepCosts`).

    flock /tmp/headstart-bench.lock python -m bench.fleet.sim.calibrate [--threads 1]

Runs `LLMEngine` in this process with one torch thread (as each live replica runs) and
times single steps: a prefill of N new tokens behind C cached ones (N = 32 … 512, C = 0 and
1,024), and decode steps of k = 1 … 16 requests. Least squares give the step's fixed cost
and the cost per decoding request (from the decodes), then what a step that prefills costs
beyond that whatever its size, per prefill token and per (query, context) token pair
attended (from the prefills). Medians of `--repeats` steps; the
machine is shared, so run it twice and compare.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np
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


def _fit_prefill(points: list[tuple[int, int, float]],
                 fixed_s: float) -> tuple[float, float, float]:
    """(a prefill step's fixed seconds beyond `fixed_s`, seconds per new token, per attended
    pair) fitting t - fixed = f + a N + b N (C + N/2)."""
    rows = np.array([[1.0, n, n * (c + n / 2)] for n, c, _ in points])
    times = np.array([t - fixed_s for _, _, t in points])
    (extra, per_token, per_pair), *_ = np.linalg.lstsq(rows, times, rcond=None)
    return max(0.0, float(extra)), float(per_token), float(per_pair)


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
    for cached in (0, 1024):
        for n in (32, 128, 256, 512):
            times = []
            for _ in range(repeats):
                shared = ids(cached)
                if cached:
                    engine.generate([shared], one)
                engine.add_request(shared + ids(n), one)
                times.append(_timed_step(engine))
                while engine.has_unfinished():
                    engine.step()
            prefill.append((n, cached, statistics.median(times)))
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
    d0, per_seq = _fit(decode)
    extra, per_token, per_pair = _fit_prefill(prefill, d0)
    return {"step_s": round(d0, 5), "prefill_token_s": round(per_token, 7),
            "decode_seq_s": round(per_seq, 6), "attend_pair_s": round(per_pair, 10),
            "prefill_step_s": round(extra, 5),
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
