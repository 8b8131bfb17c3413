"""Judging one grey-zone pair, off the request path: the pair read again, the entry read as
stored now, the judge asked, the verdict applied (cache/promotion.py).

The lookup may have scored the pair from one reading (an upper bound: a miss reads one
order only), so the verifier reads it in both orders here; a pair under the route's floor
is dropped unjudged. The miss's own store lands first (`ResponseCache.settle`), so an alias
replaces the answer the miss stored, never the other way round. The entry may be gone
(expired, purged) by then: nothing is judged. A judge that fails or cannot answer gives no
verdict: nothing is promoted, refused, counted or logged, and the requests are as they were
(`judge_errors` counts it). The outcome is typed, each with its reason.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from cache.grey import GreyPair
from cache.judgement import Judge, Judgement
from cache.keys import verify_text
from cache.stores.base import CacheEntry, StoreUnavailable

if TYPE_CHECKING:
    from cache.response_cache import ResponseCache

log = logging.getLogger("headstart.cache")
Status = Literal["promoted", "refused", "below_floor", "clash", "gone", "no_verdict",
                 "store_error"]


@dataclass(frozen=True)
class Outcome:
    """What became of one pair: `promoted` / `refused` (a verdict applied); `below_floor`
    (read in both orders, under the route's floor), `clash` (an exact check rejects it
    now), `gone` (the entry expired or was purged), `no_verdict` (the judge failed),
    `store_error` (the store was unavailable)."""

    status: Status
    score: float | None = None
    judgement: Judgement | None = None


async def score_pair(cache: ResponseCache, cached: str, new: str) -> float | None:
    """The verifier's score of the pair in both orders (1.0 when they read the same), or
    None when an exact check rejects it."""
    verdict = (await cache.semantic.verify([cached], new, 0.0))[0]
    if verdict.reason == "same_text":
        return 1.0
    return verdict.score if verdict.ok else None


async def judge_pair(cache: ResponseCache, pair: GreyPair, judge: Judge) -> Outcome:
    """Judge `pair` and apply the verdict; never raises."""
    settings = pair.settings
    try:
        await cache.settle(pair.req, settings)
        new = verify_text(pair.req, settings.context) or ""
        score = await score_pair(cache, pair.candidate.question, new)
        if score is None:
            return Outcome("clash")
        if score < settings.judge_floor:
            return Outcome("below_floor", score)
        entry = await cache.backend.get(pair.candidate.key)
        if entry is None or (entry.semantic_expires_at or 0.0) <= time.time():
            return Outcome("gone", score)
        judgement = await _ask(judge, pair, entry)
        if judgement is None:
            cache.stats.record(settings.route, "judge_errors")
            return Outcome("no_verdict", score)
        return Outcome(await cache.promoter.apply(pair, entry, judgement, score), score,
                       judgement)
    except StoreUnavailable:
        cache.stats.record(settings.route, "store_errors")
        return Outcome("store_error")


async def _ask(judge: Judge, pair: GreyPair, entry: CacheEntry) -> Judgement | None:
    try:
        return await judge(pair, entry)
    except Exception as e:  # noqa: BLE001 - a judge that breaks gives no verdict
        log.warning("cache: judge %s failed (%s); no verdict", judge.name, e)
        return None
