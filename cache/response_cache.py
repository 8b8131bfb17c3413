"""The response cache: exact then semantic lookups, stores, purges and stats, over one store.

This is the whole of `cache/` as the gateway sees it (through `gateway/cache_stage.py`).
A store failure is never an error here: it is counted, logged by the store, and the
request goes on as a miss (lookups) or unstored (stores).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from cache.exact import ExactCache
from cache.guard import Guard
from cache.keys import CacheRequest, exact_key, query_text
from cache.semantic import SemanticCache, not_cacheable
from cache.settings import CacheSettings
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


class ResponseCache:
    def __init__(self, store: CacheStore, embedder=None, guard: Guard | None = None) -> None:
        if embedder is None:
            from cache.embedder import Embedder

            embedder = Embedder.shared()
        self.backend = store
        self.exact = ExactCache(store)
        self.semantic = SemanticCache(store, embedder, guard)
        self.stats = CacheStats()

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
            return Lookup("bypass")
        key = exact_key(req)
        result = Lookup("miss", key=key)
        try:
            if settings.exact_enabled:
                entry = await self.exact.lookup(req, max_age_s=max_age_s, key=key)
                if entry is not None:
                    self.stats.record(settings.route, "exact_hits")
                    return Lookup("exact", entry.answer, None, key)
            if not_cacheable(req, settings) is None:
                sem = await self.semantic.lookup(req, settings, max_age_s=max_age_s)
                result.vector = sem.vector
                if sem.rejections:
                    self.stats.record(settings.route, "guard_rejections", sem.rejections)
                if sem.entry is not None:
                    self.stats.record(settings.route, "semantic_hits")
                    return Lookup("semantic", sem.entry.answer, sem.similarity, key, sem.vector)
            elif not settings.exact_enabled:
                self.stats.record(settings.route, "bypasses")
                return Lookup("bypass", key=key)
        except StoreUnavailable:
            self.stats.record(settings.route, "store_errors")
            result.error = True
        except Exception:
            log.exception("cache lookup failed; serving as a miss")
            self.stats.record(settings.route, "store_errors")
            result.error = True
        self.stats.record(settings.route, "misses")
        return result

    async def store(self, req: CacheRequest, answer: dict[str, Any], settings: CacheSettings,
                    *, vector: np.ndarray | None = None, ttl_s: float | None = None,
                    source: str = "upstream", force: bool = False) -> bool:
        """Store `answer` for `req` in the enabled caches; False when nothing was stored.
        `force` stores in both caches whatever the route enables (curated admin entries)."""
        exact_on = settings.exact_enabled or force
        semantic_on = bool(query_text(req)) if force else not_cacheable(req, settings) is None
        if not (exact_on or semantic_on):
            return False
        try:
            entry = ExactCache.entry(req, answer, ttl_s or settings.exact_ttl_s, source)
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
        """Delete entries matching every given filter (none given: everything)."""
        if key is not None and route is None and namespace is None:
            keys = [key]
        else:
            keys = [m["key"] for m in await self.backend.metas()
                    if (route is None or m.get("route") == route)
                    and (namespace is None or m.get("namespace") == namespace)
                    and (key is None or m.get("key") == key)]
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
        await self.semantic.close()
        await self.backend.close()

