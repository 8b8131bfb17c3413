"""Labelled-pairs evaluation of the semantic cache (fow-cache's JSONL format).

Each pair runs against an empty cache through the real store/lookup path: `a` is asked
first and its answer stored, then `b` is looked up. A served `b` is a true hit when
`same_answer` is true, a false hit otherwise. `a`/`b` are questions (strings) or whole
conversations (lists of {role, content} ending with the user turn). Embeddings are computed
up front in batches with the real model, then handed to the cache by a lookup table.

A fixed split by id hash keeps 30% of the pairs out of any tuning: `split="held_out"`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from cache import pair_model
from cache.guard import Guard
from cache.keys import CacheRequest, partition_key, query_text, verify_text
from cache.question import key_words
from cache.response_cache import ResponseCache
from cache.semantic import LEXICAL_OVERLAP, lexical_first
from cache.settings import CacheSettings
from cache.stores.memory import MemoryStore

HELD_OUT_TENTHS = 3


def is_held_out(pair_id: str) -> bool:
    """The fixed held-out split: 30% of ids by sha1, never used for tuning."""
    return int(hashlib.sha1(pair_id.encode()).hexdigest(), 16) % 10 < HELD_OUT_TENTHS


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95%) of a rate of k in n, as (low, high)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def default_pairs() -> Path:
    """fow-cache's labelled question pairs, where its package is installed."""
    spec = importlib.util.find_spec("fow_cache")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("fow-cache is not installed; pass --pairs FILE")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "pairs.jsonl"


def load_pairs(path: str | Path, split: str = "all") -> list[dict[str, Any]]:
    """Pairs from a JSONL file (or every *.jsonl under a folder); split: all|held_out|train."""
    p = Path(path)
    files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    pairs = [json.loads(line) for f in files for line in f.read_text().splitlines()
             if line.strip()]
    if split == "held_out":
        return [x for x in pairs if is_held_out(str(x["id"]))]
    if split == "train":
        return [x for x in pairs if not is_held_out(str(x["id"]))]
    return pairs


@dataclass
class EvalReport:
    pairs: int = 0
    true_hits: int = 0
    should_hit: int = 0
    false_hits: int = 0
    traps: int = 0
    by_category: dict[str, dict[str, Any]] = field(default_factory=dict)
    false_hit_ids: list[str] = field(default_factory=list)
    operating_points: list[dict[str, Any]] = field(default_factory=list)  # see `points`
    missed_by: dict[str, int] = field(default_factory=dict)  # same-answer pairs not served

    @property
    def true_hit_rate(self) -> float:
        return self.true_hits / self.should_hit if self.should_hit else 0.0

    @property
    def false_hit_rate(self) -> float:
        return self.false_hits / self.traps if self.traps else 0.0

    def summary(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "true_hit_rate": round(self.true_hit_rate, 4),
                "false_hit_rate": round(self.false_hit_rate, 4),
                "true_hit_ci": wilson(self.true_hits, self.should_hit),
                "false_hit_ci": wilson(self.false_hits, self.traps),
                "by_category": self.by_category, "operating_points": self.operating_points,
                "missed_by": self.missed_by, "false_hit_ids": self.false_hit_ids}


class _TableEmbedder:
    """Serves precomputed embeddings; falls back to the real model for unseen text."""

    def __init__(self, real, table: dict[str, np.ndarray]) -> None:
        self.real, self.table = real, table

    async def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.table]
        if missing:
            for t, v in zip(missing, await self.real.embed(missing), strict=True):
                self.table[t] = v
        return np.stack([self.table[t] for t in texts])



def _request(side: str | list[dict[str, Any]], settings: CacheSettings) -> CacheRequest:
    messages = [{"role": "user", "content": side}] if isinstance(side, str) else list(side)
    return CacheRequest(route=settings.route, model="eval", messages=messages,
                        params={"temperature": 0})


def _category(pair: dict[str, Any]) -> str:
    return str(pair.get("category") or pair.get("subtype") or "uncategorised")


async def evaluate(pairs: list[dict[str, Any]], settings: CacheSettings, embedder=None,
                   points: dict[str, float] | None = None) -> EvalReport:
    """Run every pair through a fresh in-memory cache configured by `settings`. `points`
    (name -> verifier threshold): also report the rates each would give (one run: each
    pair is looked up at threshold 0 once to read its score)."""
    if embedder is None:
        from cache.embedder import Embedder

        embedder = Embedder.shared()
    settings = replace(settings, semantic_enabled=True, exact_enabled=False)
    texts = sorted({query_text(_request(p[s], settings)) or "" for p in pairs for s in "ab"})
    vectors = await asyncio.to_thread(embedder.embed_sync, texts) if texts else []
    table = _TableEmbedder(embedder, dict(zip(texts, vectors, strict=True)))
    report = EvalReport()
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    same: dict[str, bool] = {}
    scores: list[float | None] = []  # per pair: the score it was served at (threshold 0)
    probe = replace(settings, verifier_threshold=0.0, adaptive_skip=False)
    settings = replace(settings, adaptive_skip=False)
    for pair in pairs:
        cache = ResponseCache(MemoryStore(), embedder=table)
        await cache.store(_request(pair["a"], settings), {"content": "cached"}, settings)
        found = await cache.lookup(_request(pair["b"], settings), settings)
        served = found.status == "semantic"
        if points:
            seen = await cache.lookup(_request(pair["b"], probe), probe)
            scores.append(None if seen.status != "semantic" else
                          1.0 if seen.score is None else seen.score)
        cat = _category(pair)
        groups[cat][0] += served
        groups[cat][1] += 1
        same[cat] = bool(pair["same_answer"])
        report.pairs += 1
        if pair["same_answer"]:
            report.should_hit += 1
            report.true_hits += served
            if not served:
                why = miss_reason(pair, settings, table.table)
                report.missed_by[why] = report.missed_by.get(why, 0) + 1
        else:
            report.traps += 1
            report.false_hits += served
            if served:
                report.false_hit_ids.append(str(pair["id"]))
    if points:
        report.operating_points = [
            _point(name, t, scores, pairs) for name, t in
            sorted({**points, "route": _route_threshold(settings)}.items(), key=lambda x: x[1])]
    report.by_category = {
        cat: {"pairs": n, "served": k, "served_rate": round(k / n, 4), "same_answer": same[cat]}
        for cat, (k, n) in sorted(groups.items())
    }
    return report


def miss_reason(pair: dict[str, Any], settings: CacheSettings,
                vectors: dict[str, np.ndarray]) -> str:
    """Why `b` was not served `a`'s answer: another partition (system prompt, earlier
    turns), a cosine under the floor (and too few key words shared to be read before the
    embedding), or the guard's reason (`verifier`, `numbers`, ...)."""
    a, b = _request(pair["a"], settings), _request(pair["b"], settings)
    if partition_key(a, settings.context) != partition_key(b, settings.context):
        return "partition"
    va, vb = verify_text(a, settings.context) or "", verify_text(b, settings.context) or ""
    verdict = Guard().check(va, vb, settings.verifier_threshold)
    cosine = float(vectors[query_text(a) or ""] @ vectors[query_text(b) or ""])
    words_a, words_b = key_words(va), key_words(vb)
    lexical = lexical_first(settings, vb) and \
        len(words_a & words_b) >= LEXICAL_OVERLAP * len(words_a | words_b) > 0
    if cosine < settings.floor and verdict.reason != "same_text" and not lexical:
        return "cosine_floor"
    return verdict.reason if not verdict.ok else "other"


def _route_threshold(settings: CacheSettings) -> float:
    return Guard().threshold(settings.verifier_threshold, conversation=settings.context == "semantic")


def default_points(context: str = "full") -> dict[str, float]:
    """The shipped verifier's cross-validated operating points (name -> threshold) for
    questions; none for `semantic` context (conversations have one threshold of their own)."""
    model = pair_model.shared()
    if model is None or context == "semantic":
        return {}
    return dict(model.config.operating_points)


def _point(name: str, threshold: float, scores: list[float | None],
           pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """True- and false-hit rates (with Wilson intervals) at one verifier threshold."""
    served = [s is not None and s >= threshold for s in scores]
    same = [bool(p["same_answer"]) for p in pairs]
    th = sum(a and b for a, b in zip(served, same, strict=True))
    fh = sum(a and not b for a, b in zip(served, same, strict=True))
    n_same, n_traps = sum(same), len(same) - sum(same)
    return {"name": name, "threshold": round(threshold, 4),
            "true_hit_rate": round(th / n_same, 4) if n_same else 0.0,
            "true_hit_ci": wilson(th, n_same),
            "false_hit_rate": round(fh / n_traps, 4) if n_traps else 0.0,
            "false_hit_ci": wilson(fh, n_traps)}


def format_table(report: EvalReport, title: str = "") -> str:
    lines = [title] if title else []
    lines.append(f"{'category':<28}{'pairs':>7}{'served':>8}{'rate':>8}  kind")
    for cat, row in report.by_category.items():
        kind = "should hit" if row["same_answer"] else "trap (false hit if served)"
        lines.append(f"{cat:<28}{row['pairs']:>7}{row['served']:>8}"
                     f"{row['served_rate']:>8.1%}  {kind}")
    lo, hi = wilson(report.true_hits, report.should_hit)
    flo, fhi = wilson(report.false_hits, report.traps)
    lines.append(f"true-hit rate  {report.true_hit_rate:.1%} ({report.true_hits}/"
                 f"{report.should_hit}, 95% CI {lo:.1%}-{hi:.1%})   false-hit rate  "
                 f"{report.false_hit_rate:.1%} ({report.false_hits}/{report.traps}, "
                 f"95% CI {flo:.1%}-{fhi:.1%})")
    if report.false_hit_ids:  # the pairs to read first: each is a wrong answer served
        lines.append("false hits: " + ", ".join(report.false_hit_ids))
    if report.missed_by:
        lines.append("same-answer pairs missed, by reason: " + ", ".join(
            f"{why} {n}" for why, n in sorted(report.missed_by.items(), key=lambda x: -x[1])))
    if report.operating_points:
        lines.append(f"{'operating point':<20}{'threshold':>10}{'true hits':>11}{'false hits':>12}")
        for p in report.operating_points:
            lines.append(f"{p['name']:<20}{p['threshold']:>10.4f}{p['true_hit_rate']:>11.1%}"
                         f"{p['false_hit_rate']:>12.1%}")
    return "\n".join(lines)
