"""The response cache: exact then semantic lookups, stores, purges and stats, over one store.

This is the whole of `cache/` as the gateway sees it (through `gateway/cache_stage.py`).
A store failure is never an error here: it is counted, logged by the store, and the
request goes on as a miss (lookups) or unstored (stores). On a route with a judge, a miss
may carry a grey-zone candidate (`Lookup.grey`) for judging after the answer is written
(cache/judging.py, applied by `promoter`); purges take the aliases of what they remove.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from cache.evidence import band_of
from cache.exact import ExactCache
from cache.grey import GreyCandidate
from cache.guard import Guard, Verdict
from cache.keys import (
    CacheRequest,
    answer_fits,
    counted,
    exact_key,
    partition_key,
    query_text,
)
from cache.promotion import Promoter
from cache.semantic import SemanticCache, not_cacheable
from cache.settings import CacheSettings
from cache.skip import SkipGate
from cache.stats import CacheStats
from cache.stores import open_store
from cache.stores.base import CacheStore, IndexEvent, StoreUnavailable

log = logging.getLogger("headstart.cache")

Status = Literal["exact", "semantic", "miss", "bypass"]


@dataclass
class Lookup:
    status: Status
    answer: dict[str, Any] | None = None
    similarity: float | None = None
    key: str | None = None
    vector: np.ndarray | None = None  # the query embedding, if one was computed
    error: bool = False  # the store failed; served as a miss
    score: float | None = None  # the verifier's score of a semantic hit
    skipped: str | None = None  # why a lookup was skipped: the whole of it (status bypass)
    # or, on a miss, the semantic one ("semantic:temperature", "semantic:idle", ...)
    grey: GreyCandidate | None = None  # a miss on a route with a judge: the pair to judge


class ResponseCache:
    def __init__(self, store: CacheStore, embedder=None, guard: Guard | None = None) -> None:
        if embedder is None:
            from cache.embedder import Embedder

            embedder = Embedder.shared()
        self.backend = store
        self.exact = ExactCache(store)
        self.semantic = SemanticCache(store, embedder, guard)
        self.stats = CacheStats()
        self.skip = SkipGate()
        self.promoter = Promoter(store, self.semantic, self.stats)
        self._pending: dict[str, set[asyncio.Task]] = {}  # store_soon tasks by key, partition

    @classmethod
    async def open(cls, redis_url: str | None = None, *, embedder=None,
                   guard: Guard | None = None, **store_options: Any) -> ResponseCache:
        store = await open_store(redis_url, **store_options)
        cache = cls(store, embedder, guard)
        if store.shared:
            try:
                await cache.semantic.reload()
            except StoreUnavailable:
                log.warning("cache store unavailable at start; the index loads when it returns")
            cache.semantic.start_sync()
        return cache

    async def lookup(self, req: CacheRequest, settings: CacheSettings, *,
                     max_age_s: float | None = None) -> Lookup:
        """Exact, then semantic (when the request is cacheable); never raises."""
        if not settings.enabled:
            self.stats.record(settings.route, "bypasses")
            return Lookup("bypass", skipped="disabled")
        key = exact_key(req)
        result = Lookup("miss", key=key)
        try:
            if self._pending:
                await self._settled(key, partition_key(req, settings.context))
            exact_on = settings.exact_on(req)
            if exact_on:
                entry = await self._exact(req, key, max_age_s)
                if entry is not None:
                    self.stats.record(settings.route, "exact_hits")
                    return Lookup("exact", entry.answer, None, key)
            why = not_cacheable(req, settings)
            if why is None and settings.adaptive_skip and not self.skip.should_look(settings.route):
                why = "idle"
            if why is None:
                sem = await self.semantic.lookup(  # a probe's store must find its vector
                    req, settings, max_age_s=max_age_s,
                    need_vector=self.skip.skipping(settings.route))
                result.vector = sem.vector
                self.skip.record(settings.route, sem.entry is not None)
                if sem.rejections:
                    self.stats.record(settings.route, "guard_rejections", sem.rejections)
                if settings.judge:
                    self._judged_lookup(settings, sem.verdict if sem.entry else None, result,
                                        sem.grey)
                if sem.entry is not None:
                    self.stats.record(settings.route, "semantic_hits")
                    return Lookup("semantic", sem.entry.answer, sem.similarity, key, sem.vector,
                                  score=sem.verdict.score if sem.verdict else None)
            elif not exact_on:
                self.stats.record(settings.route, "bypasses")
                if settings.exact_enabled and why == "disabled":
                    why = "exact:tools"  # the only cache on, and it keeps no tools here
                return Lookup("bypass", key=key, skipped=why.replace("_", "-"))
            elif settings.semantic_enabled:
                result.skipped = "semantic:" + why.replace("_", "-")
                if why == "idle":
                    self.stats.record(settings.route, "semantic_skips")
            if settings.exact_enabled and not exact_on and result.skipped is None:
                result.skipped = "exact:tools"
        except StoreUnavailable:
            self.stats.record(settings.route, "store_errors")
            result.error = True
        except Exception:
            log.exception("cache lookup failed; serving as a miss")
            self.stats.record(settings.route, "store_errors")
            result.error = True
        self.stats.record(settings.route, "misses")
        return result

    def _judged_lookup(self, settings: CacheSettings, served: Verdict | None, result: Lookup,
                       grey: GreyCandidate | None) -> None:
        """A route with a judge counts its hits in its budget (under the threshold: the
        band it was served in) and keeps a miss's grey-zone candidate."""
        if served is not None:
            learned = served.reason == "learned" and served.score is not None
            self.semantic.budgets.route(settings.route, settings.max_false_hit_rate) \
                .record_hit(band_of(served.score) if learned else None)  # type: ignore[arg-type]
            if learned:
                self.stats.record(settings.route, "learned_hits")
        elif grey is not None:
            result.grey = grey
            self.stats.record(settings.route, "grey_zone")

    async def _exact(self, req: CacheRequest, key: str, max_age_s: float | None):
        """The exact entry for `req` (its tenant's, else a route-wide curated one) whose
        answer fits the request's length limit."""
        entry = await self.exact.lookup(req, max_age_s=max_age_s, key=key)
        if entry is None and req.tenant:
            entry = await self.exact.lookup(req, max_age_s=max_age_s,
                                            key=exact_key(req, route_wide=True))
        return entry if entry is not None and answer_fits(entry.answer, req) else None

    def store_soon(self, req: CacheRequest, answer: dict[str, Any], settings: CacheSettings,
                   *, vector: np.ndarray | None = None) -> asyncio.Task:
        """`store` as a task of its own, so the answer is written before it runs. Until it
        is done, a lookup of the same exact key or semantic partition waits for it
        (`_settled`), so a repeat sent right after its answer still finds it."""
        marks = [exact_key(req), partition_key(req, settings.context)]
        task = asyncio.get_running_loop().create_task(
            self.store(req, answer, settings, vector=vector))
        for mark in marks:
            self._pending.setdefault(mark, set()).add(task)

        def done(t: asyncio.Task) -> None:
            for mark in marks:
                tasks = self._pending.get(mark)
                if tasks is not None:
                    tasks.discard(t)
                    if not tasks:
                        del self._pending[mark]
        task.add_done_callback(done)
        return task

    async def _settled(self, *marks: str) -> None:
        """Wait for pending stores under any of `marks` (exact keys, partitions)."""
        tasks = {t for m in marks for t in self._pending.get(m, ())}
        if tasks:
            await asyncio.wait(tasks)

    async def settle(self, req: CacheRequest, settings: CacheSettings) -> None:
        """Wait for a store of `req` still in flight (its exact key or partition)."""
        await self._settled(exact_key(req), partition_key(req, settings.context))

    async def flush(self) -> None:
        """Wait for every pending store."""
        await self._settled(*list(self._pending))

    async def store(self, req: CacheRequest, answer: dict[str, Any], settings: CacheSettings,
                    *, vector: np.ndarray | None = None, ttl_s: float | None = None,
                    source: str = "upstream", force: bool = False) -> bool:
        """Store `answer` for `req` in the enabled caches; False when nothing was stored.
        `force` stores in both caches whatever the route enables (curated admin entries)."""
        exact_on = settings.exact_on(req) or force
        semantic_on = bool(query_text(req)) if force else not_cacheable(req, settings) is None
        if semantic_on and not force and vector is None and self.skip.skipping(settings.route):
            semantic_on = False  # an idle route: no embedding for a store (cache/skip.py)
        if not (exact_on or semantic_on):
            return False
        try:
            entry = ExactCache.entry(req, counted(answer, req), ttl_s or settings.exact_ttl_s,
                                     source)
            if not exact_on:
                entry.exact_expires_at = None
            if semantic_on:
                if vector is None:
                    vector = await self.semantic.embed(query_text(req) or "")
                self.semantic.attach(entry, req, settings, vector, ttl_s)
            await self.backend.put(entry)
            if semantic_on:
                self.semantic.apply(IndexEvent.of(entry))
            self.stats.record(settings.route, "stores")
            return True
        except StoreUnavailable:
            self.stats.record(settings.route, "store_errors")
        except Exception:
            log.exception("cache store failed; answer not cached")
            self.stats.record(settings.route, "store_errors")
        return False

    async def purge(self, route: str | None = None, namespace: str | None = None,
                    key: str | None = None) -> int:
        """Delete entries matching every given filter (none given: everything), and the
        aliases of every entry deleted (cache/promotion.py)."""
        metas = await self.backend.metas()
        keys = [m["key"] for m in metas
                if (route is None or m.get("route") == route)
                and (namespace is None or m.get("namespace") == namespace)
                and (key is None or m.get("key") == key)]
        if key is not None and not keys:
            keys = [key]  # not listed (expired meanwhile): deleting it costs nothing
        gone = set(keys)
        keys += [m["key"] for m in metas if m.get("alias_of") in gone and m["key"] not in gone]
        removed = await self.backend.delete(keys)
        for k in keys:
            self.semantic.index.remove(k)
        return removed

    async def entry_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in await self.backend.metas():
            counts[m.get("route") or ""] = counts.get(m.get("route") or "", 0) + 1
        return counts

    async def close(self) -> None:
        await self.flush()
        await self.semantic.close()
        await self.backend.close()

