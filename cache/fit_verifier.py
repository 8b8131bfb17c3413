"""Refit the verifier's weights (cache/data/verifier.json) on the labelled pairs' TRAIN split.

    python -m cache.fit_verifier [--pairs FILE] [--extra FILE ...] [--relief 0.15] [--out PATH]

Every train pair is read by the guard with the verifier off; the reworded pairs its word
rules reject on content ("content" verdicts with signals) are the examples: a same-answer
pair is a positive, a trap a negative. A logistic regression (L2, classes weighted equally,
Newton steps in numpy) is fitted on them; the threshold is set just above the highest score
any train trap gets, in-sample or leave-one-out, so no train trap would be served. The
held-out split is never read here. `--extra`: more labelled pairs of one's own, used whole.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cache.eval import default_pairs, load_pairs
from cache.guard import Guard, GuardConfig
from cache.verifier import WEIGHTS, PairSignals, Verifier

BAR = 0.78  # the default route threshold the pairs are read at
MARGIN = 0.02  # score above the highest train trap's


def examples(pairs: list[dict], embed, tokens) -> tuple[list[PairSignals], np.ndarray]:
    """The guard's signals (completed with both texts' word pieces) for each pair it
    rejects on content as a rewording."""
    pairs = [p for p in pairs if isinstance(p["a"], str) and isinstance(p["b"], str)]
    texts = sorted({p[s] for p in pairs for s in "ab"})
    vectors = dict(zip(texts, embed(texts), strict=True))
    guard = Guard(GuardConfig(verify=False))
    signals, labels = [], []
    for p in pairs:
        sim = float(vectors[p["a"]] @ vectors[p["b"]])
        verdict = guard.check(p["a"], p["b"], sim, BAR)
        if verdict.reason == "content" and "signals" in verdict.details:
            found = verdict.details["signals"]
            signals.append(found.with_pieces(tokens(p["a"]), tokens(p["b"])))
            labels.append(bool(p["same_answer"]))
    return signals, np.array(labels)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0,
                 steps: int = 50) -> tuple[np.ndarray, float]:
    """Weights and intercept of an L2 logistic regression, both classes weighted equally."""
    w = np.where(y, 0.5 / max(y.sum(), 1), 0.5 / max((~y).sum(), 1)) * len(y)
    xb = np.hstack([x, np.ones((len(x), 1))])
    beta = np.zeros(xb.shape[1])
    penalty = np.diag([l2] * x.shape[1] + [0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-xb @ beta))
        grad = xb.T @ (w * (p - y)) + penalty @ beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + penalty + 1e-9 * np.eye(len(beta))
        beta -= np.linalg.solve(hess, grad)
    return beta[:-1], float(beta[-1])


def _scores(x: np.ndarray, coef: np.ndarray, intercept: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ coef + intercept)))


def fit(signals: list[PairSignals], labels: np.ndarray, relief: float) -> tuple[Verifier, dict]:
    """The verifier, and a report: leave-one-out true passes at the chosen threshold."""
    raw = np.stack([s.features() for s in signals])
    mean, scale = raw.mean(0), raw.std(0) + 1e-9
    x = (raw - mean) / scale
    coef, intercept = fit_logistic(x, labels)
    loo = np.zeros(len(labels))
    for i in range(len(labels)):
        keep = np.arange(len(labels)) != i
        c, b = fit_logistic(x[keep], labels[keep])
        loo[i] = _scores(x[i:i + 1], c, b)[0]
    traps = ~labels
    top_trap = max(_scores(x[traps], coef, intercept).max(), loo[traps].max())
    threshold = min(0.999, float(top_trap) + MARGIN)
    verifier = Verifier(tuple(mean.round(6)), tuple(scale.round(6)), tuple(coef.round(6)),
                        round(intercept, 6), round(threshold, 4), relief)
    report = {"examples": len(labels), "positives": int(labels.sum()),
              "traps": int(traps.sum()), "threshold": verifier.threshold,
              "loo_true_passes": int((labels & (loo >= threshold)).sum()),
              "loo_trap_passes": int((traps & (loo >= threshold)).sum())}
    return verifier, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cache.fit_verifier", description=__doc__)
    ap.add_argument("--pairs", help="labelled pairs (default: fow-cache's pairs.jsonl)")
    ap.add_argument("--extra", action="append", default=[],
                    help="more labelled pairs (all of each file is used); repeatable")
    ap.add_argument("--relief", type=float, default=0.15,
                    help="how far under the bar a verified rewording may be")
    ap.add_argument("--out", default=str(WEIGHTS))
    args = ap.parse_args(argv)
    from cache.embedder import Embedder

    pairs = load_pairs(args.pairs or default_pairs(), split="train")
    pairs += [p for extra in args.extra for p in load_pairs(extra)]
    embedder = Embedder.shared()
    signals, labels = examples(pairs, embedder.embed_sync, embedder.tokens_sync)
    verifier, report = fit(signals, labels, args.relief)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    verifier.save(args.out)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
