"""The pair verifier's forms side by side: float32, bfloat16 and int8 linears, in one run.

    python -m bench.cache.verifier_bench [--pairs FILE] [--rounds 3] [--threads 1]

Times `PairModel.score` on one pair at a time (both orders, the LRU of scores cleared), the
forms interleaved pair by pair so that a noisy machine slows them alike, and compares each
form's scores with float32's on the same pairs: verdicts flipped at the shipped threshold
and how far the logits move. A form this CPU cannot run (bfloat16 without native support,
int8 without the engine's kernels) is left out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from cache.pair_model import PairModel

HELDOUT = Path(__file__).resolve().parents[2] / "cache" / "data" / "heldout_pairs_2.jsonl"


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def forms() -> dict[str, PairModel]:
    out = {"float32": PairModel.load(bf16=False, int8=False)}
    bf16 = PairModel.load(bf16=True, int8=False)
    if bf16.bf16:
        out["bfloat16"] = bf16
        int8 = PairModel.load(bf16=True, int8=True)
        if int8.int8:
            out["int8"] = int8
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, default=HELDOUT)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in args.pairs.read_text().splitlines() if line.strip()]
    pairs = [(r["a"], r["b"]) for r in rows]
    models = forms()
    times: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():  # warm up
        model.score(pairs[:4])
    for _ in range(args.rounds):
        for pair in pairs:
            for name, model in models.items():
                model._recent.clear()
                start = time.perf_counter()
                model.score([pair])
                times[name].append(time.perf_counter() - start)
    scores = {name: model.score(pairs) for name, model in models.items()}
    ref, bar = scores["float32"], models["float32"].threshold
    base = float(np.median(times["float32"]))
    print(f"{len(pairs)} pairs from {args.pairs.name}, {args.rounds} rounds, "
          f"{args.threads} thread(s); threshold {bar}")
    print(f"{'form':10} {'p50 ms':>7} {'vs f32':>7} {'flips':>6} {'logit |d| p50':>14} {'p99':>6}")
    for name, got in scores.items():
        ms = float(np.median(times[name]))
        moved = np.abs(logit(got) - logit(ref))
        flips = int(((got >= bar) != (ref >= bar)).sum())
        print(f"{name:10} {ms * 1e3:7.2f} {ms / base:7.2f} {flips:6d} "
              f"{np.median(moved):14.3f} {np.percentile(moved, 99):6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
