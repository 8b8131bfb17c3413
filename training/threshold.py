"""Choosing the verifier's thresholds from out-of-fold scores.

train.py scores every training pair with a model that never saw the pair's group and keeps
those scores (`OOF_SCORES`, keyed by the pair's two texts). The thresholds are chosen over
the pairs that reach the verifier as the guard runs it: typos mended, a pair that reads the
same served and an exact clash (cache/checks.py) rejected before the model. A change to the
exact checks therefore moves the thresholds without a retrain:

    python -m training.train --thresholds-only
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from cache.eval import wilson
from cache.guard import exact_verdict
from cache.typos import mend_typos

OOF_SCORES = Path(__file__).parent / "data" / "oof_scores.safetensors"
POINTS = (0.005, 0.01, 0.02, 0.05)  # false-hit rates `eval-cache` reports operating points for


def pair_key(a: str, b: str) -> int:
    """A pair's two texts as one signed 64-bit key."""
    return int.from_bytes(hashlib.sha1(f"{a}\x00{b}".encode()).digest()[:8], "big", signed=True)


def save_scores(pairs: list[dict], oof: np.ndarray, path: Path = OOF_SCORES) -> None:
    keys = torch.tensor([pair_key(p["a"], p["b"]) for p in pairs], dtype=torch.int64)
    save_file({"keys": keys, "scores": torch.tensor(oof, dtype=torch.float32)}, str(path))


def load_scores(pairs: list[dict], path: Path = OOF_SCORES) -> np.ndarray:
    """The stored out-of-fold score of each pair; a pair the stored run did not score means
    the training pairs changed, and only a retrain can score it."""
    stored = load_file(str(path))
    by_key = dict(zip(stored["keys"].tolist(), stored["scores"].tolist(), strict=True))
    missing = [p for p in pairs if pair_key(p["a"], p["b"]) not in by_key]
    if missing:
        raise SystemExit(f"{len(missing)} training pairs have no out-of-fold score (first: "
                         f"{missing[0]['a']!r} / {missing[0]['b']!r}); retrain")
    return np.array([by_key[pair_key(p["a"], p["b"])] for p in pairs])


def before_model(pairs: list[dict]) -> list[bool | None]:
    """Each pair's verdict without the verifier (served, rejected), or None when the
    verifier decides: what the guard does before the model."""
    out: list[bool | None] = []
    for p in pairs:
        verdict = exact_verdict(*mend_typos(p["a"], p["b"]))
        out.append(None if verdict is None else verdict.ok)
    return out


def threshold_at(score: np.ndarray, same: np.ndarray, max_false: float,
                 model: np.ndarray | None = None, served: np.ndarray | None = None) -> float:
    """The lowest threshold at which at most `max_false` of the near misses pass, counting
    the near misses served without the model (`served`) and scoring only those the model
    reads (`model`; all by default)."""
    model = np.ones(len(score), bool) if model is None else model
    served = np.zeros(len(score), bool) if served is None else served
    allowed = int(np.floor(max_false * (~same).sum())) - int((served & ~same).sum())
    traps = np.sort(score[model & ~same])[::-1]
    if allowed < 0:
        return 1.0 + 1e-4
    return float(traps[allowed]) + 1e-4 if allowed < len(traps) else 0.0


def true_hits_at(score: np.ndarray, same: np.ndarray, max_false: float) -> float:
    """The share of same-answer pairs served at the lowest threshold that serves at most
    `max_false` of the near misses (all pairs read by the model): two runs' scores on the
    same pairs compare at one false-hit rate whatever their scales."""
    bar = threshold_at(score, same, max_false)
    return float((score[same] >= bar).mean()) if same.any() else 0.0


def rates(served: np.ndarray, same: np.ndarray) -> dict:
    th, fh = int((served & same).sum()), int((served & ~same).sum())
    return {"true_hits": f"{th}/{int(same.sum())}", "true_hit_ci": wilson(th, int(same.sum())),
            "false_hits": f"{fh}/{int((~same).sum())}",
            "false_hit_ci": wilson(fh, int((~same).sum()))}


def choose(pairs: list[dict], oof: np.ndarray, fold: np.ndarray, max_false: float) -> dict:
    """Thresholds (questions, conversations), operating points and cross-validated rates
    of the guard as a whole, over `pairs` with their out-of-fold scores."""
    same = np.array([p["same_answer"] for p in pairs])
    fow = np.array([p.get("source") == "fow" for p in pairs])
    conv = np.array([p.get("source") == "conversation" for p in pairs])
    early = before_model(pairs)
    model = np.array([v is None for v in early])
    served_early = np.array([v is True for v in early])
    question = ~conv

    def at(part: np.ndarray, q: float) -> float:
        return threshold_at(oof[part], same[part], q, model[part], served_early[part])

    def bar(q: float) -> float:  # over all question pairs and fow-cache's alone: the stricter
        return max(at(question, q), at(fow, q))

    t, tc = bar(max_false), at(conv, max_false)
    served = served_early | (model & (oof >= np.where(conv, tc, t)))
    folds = int(fold.max()) + 1
    return {"threshold": round(t, 4), "conversation_threshold": round(tc, 4),
            "operating_points": {f"false<={q:.1%}": round(bar(q), 4) for q in POINTS},
            "pairs": len(pairs), "reach_verifier": int(model.sum()),
            "folds": [rates(served[(fold == f) & question], same[(fold == f) & question])
                      for f in range(folds)],
            "cv_questions": rates(served[question], same[question]),
            "cv_fow_train": rates(served[fow], same[fow]),
            "cv_conversations": rates(served[conv], same[conv])}
