"""Labelled pairs from a deployment's own traffic: the grey-zone pairs its judges decided
(cache/labels.py writes them, one JSON line each, in `eval-cache`'s format).

    python -m training.train --judged headstart-labels/support.jsonl [--judged ...]

A pair judged more than once keeps its last verdict (the judge may have changed its mind;
lines share an id). Each pair's `group` is the cached question it was judged against, so a
cross-validation fold never holds one entry's pairs on both sides. A log only holds what
its judge said: a weak judge's mistakes train the verifier too, so a log from `agreement`
or a strong upstream is the one to train on.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cache.eval import load_pairs


def pairs(paths: list[str | Path]) -> list[dict]:
    """The judged pairs of every log (or folder of logs) in `paths`, the last verdict per
    id, with a group per cached question and `source: judged`."""
    latest: dict[str, dict] = {}
    for path in paths:
        for p in load_pairs(path):
            if isinstance(p.get("a"), str) and isinstance(p.get("b"), str):
                latest[str(p["id"])] = p
    out = []
    for p in latest.values():
        group = hashlib.sha1(p["a"].encode()).hexdigest()[:16]
        out.append({"id": p["id"], "a": p["a"], "b": p["b"], "same_answer": bool(p["same_answer"]),
                    "category": p.get("category") or "judged", "group": f"judged.{group}",
                    "source": "judged"})
    return out
