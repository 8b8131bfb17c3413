"""The exact cache: the canonical request's hash names the entry in the store."""

from __future__ import annotations

import time
from typing import Any

from cache.keys import CacheRequest, exact_key
from cache.stores.base import CacheEntry, CacheStore


class ExactCache:
    """`lookup(req)` -> the stored answer for this exact request, or None."""

    def __init__(self, store: CacheStore) -> None:
        self.store = store

    async def lookup(self, req: CacheRequest, *, max_age_s: float | None = None,
                     key: str | None = None) -> CacheEntry | None:
        entry = await self.store.get(key or exact_key(req))
        now = time.time()
        if entry is None or entry.exact_expires_at is None or entry.exact_expires_at <= now:
            return None
        if max_age_s is not None and now - entry.created_at > max_age_s:
            return None
        return entry

    @staticmethod
    def entry(req: CacheRequest, answer: dict[str, Any], ttl_s: float,
              source: str = "upstream") -> CacheEntry:
        """A new entry for `req` (the semantic cache may add its part before it is stored)."""
        now = time.time()
        return CacheEntry(key=exact_key(req), route=req.route, answer=answer,
                          namespace=req.namespace, tenant=req.tenant, created_at=now,
                          exact_expires_at=now + ttl_s, source=source)
