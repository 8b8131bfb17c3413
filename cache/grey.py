"""Grey-zone misses: a candidate the exact checks let through and the verifier scored under
its threshold but over the route's floor (`judge.floor`).

The request is answered as a miss, exactly as without a judge. After its answer is written,
the pair (the new question, the entry it nearly matched) goes to the route's judge, off the
request path (gateway/judge_queue.py, cache/judging.py). A would-be hit served only because
its entry's threshold loosened is, now and then, answered as a miss and judged the same way
(`explored`), so the evidence that loosened it keeps coming.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cache.budget import RouteBudget
from cache.guard import Verdict
from cache.index import IndexedEntry
from cache.keys import CacheRequest
from cache.question import form_key
from cache.settings import CacheSettings

Verify = Callable[[list[str], str, float | None, list[float]], Awaitable[list[Verdict]]]


@dataclass(frozen=True)
class GreyCandidate:
    """The entry a question nearly matched, as the lookup read it."""

    key: str  # the entry (an alias's own entry when the candidate read was an alias)
    question: str  # what the verifier read on the cached side
    score: float  # the verifier's score (one reading's bound, or both orders' mean)
    explored: bool = False  # a would-be hit under the threshold, answered as a miss


@dataclass(frozen=True)
class GreyPair:
    """What a judgement needs: the request answered as a miss, its grey-zone candidate, the
    question's embedding when the lookup made one, and the answer it was given."""

    req: CacheRequest
    settings: CacheSettings
    candidate: GreyCandidate
    answer: dict[str, Any]
    vector: np.ndarray | None = None


def better(found: GreyCandidate | None, other: GreyCandidate) -> GreyCandidate:
    """The candidate to judge of two: the higher score (an explored one first: it was a
    would-be hit)."""
    if found is None:
        return other
    return max(found, other, key=lambda c: (c.explored, c.score))


async def judged_verdicts(batch: list[tuple[IndexedEntry, IndexedEntry]], text: str,
                          settings: CacheSettings, budget: RouteBudget, threshold: float,
                          verify: Verify) -> tuple[list[Verdict], GreyCandidate | None]:
    """The verdicts on candidates (each read as itself, judged by its owner's evidence: an
    alias's entry) for a route with a judge, and the grey-zone candidate to judge. An entry
    that refused this question's form rejects it unread (`refused`); the guard reads the
    rest against the bar each entry's evidence allows (`RouteBudget.bar`); a would-be hit
    under the threshold is now and then `explored`. A miss may be read in one order only (its
    score is then that reading p's bound (p + 1) / 2, `Verdict.bound`): it is grey when p
    reaches the route's floor, and the judging reads both orders and holds their mean to it."""
    form = form_key(text)
    evidence = [owner.evidence for _, owner in batch]
    verdicts = [Verdict(False, "refused") for _ in batch]
    asks = [i for i, e in enumerate(evidence) if e is None or not e.refuses(form)]
    if asks:
        read = await verify([batch[i][0].question for i in asks], text,
                            settings.verifier_threshold,
                            [budget.bar(evidence[i], threshold) for i in asks])
        for i, verdict in zip(asks, read, strict=True):
            verdicts[i] = verdict
    grey = None
    for i, verdict in enumerate(verdicts):
        if verdict.reason == "learned" and budget.explore():
            verdicts[i] = verdict = Verdict(False, "explored", verdict.score)
        if verdict.reason == "explored" or verdict.reason == "verifier" and \
                verdict.score is not None and _reached(verdict, settings.judge_floor):
            grey = better(grey, GreyCandidate(batch[i][1].key, batch[i][0].question,
                                              verdict.score, verdict.reason == "explored"))
    return verdicts, grey


def _reached(verdict: Verdict, floor: float) -> bool:
    """Whether the verifier's reading reaches `floor`: its mean, or the one reading p whose
    bound (p + 1) / 2 the verdict holds."""
    score = verdict.score or 0.0
    return (2 * score - 1 if verdict.bound else score) >= floor
