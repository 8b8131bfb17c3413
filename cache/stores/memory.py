"""The in-process store (the embedded default): a dict of entries with expiry times."""

from __future__ import annotations

import heapq
import time
from typing import Any

from cache.stores.base import CacheEntry, IndexEvent


class MemoryStore:
    """Entries in a dict; expired ones are dropped on read and by a lazy sweep."""

    shared = False

    def __init__(self, max_entries: int | None = None) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, CacheEntry] = {}
        self._expiry: list[tuple[float, str]] = []  # min-heap of (expires_at, key)

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires_at <= time.time():
            self._entries.pop(key, None)
            return None
        return entry

    async def put(self, entry: CacheEntry) -> None:
        self._sweep()
        self._entries[entry.key] = entry
        heapq.heappush(self._expiry, (entry.expires_at, entry.key))
        if self.max_entries is not None:
            while len(self._entries) > self.max_entries and self._expiry:
                _, key = heapq.heappop(self._expiry)  # evict the soonest to expire
                self._entries.pop(key, None)

    async def annotate(self, entry: CacheEntry) -> None:
        found = await self.get(entry.key)
        if found is not None:
            found.evidence = entry.evidence

    async def delete(self, keys: list[str]) -> int:
        return sum(self._entries.pop(k, None) is not None for k in keys)

    async def metas(self) -> list[dict[str, Any]]:
        self._sweep()
        return [e.meta() for e in self._entries.values()]

    async def index_snapshot(self) -> list[IndexEvent]:
        self._sweep()
        return [IndexEvent.of(e) for e in self._entries.values()
                if e.partition and e.vector is not None]

    async def index_changes(self) -> list[IndexEvent] | None:
        return []  # one process: the semantic cache updates its index as it writes

    async def close(self) -> None:
        self._entries.clear()
        self._expiry.clear()

    def _sweep(self) -> None:
        now = time.time()
        while self._expiry and self._expiry[0][0] <= now:
            _, key = heapq.heappop(self._expiry)
            entry = self._entries.get(key)
            if entry is not None and entry.expires_at <= now:
                del self._entries[key]
