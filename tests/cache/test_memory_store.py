"""The in-process store: entries, expiry, deletion, the index snapshot."""

import time

import numpy as np

from cache.stores.base import CacheEntry
from cache.stores.memory import MemoryStore


def entry(key: str, ttl: float = 60, semantic: bool = False) -> CacheEntry:
    now = time.time()
    e = CacheEntry(key=key, route="r", answer={"content": key}, created_at=now,
                   exact_expires_at=now + ttl)
    if semantic:
        e.partition, e.question = "p", "q"
        e.vector, e.semantic_expires_at = np.ones(4, np.float32) / 2, now + ttl
    return e


async def test_put_get_delete():
    store = MemoryStore()
    await store.put(entry("a"))
    assert (await store.get("a")).answer == {"content": "a"}
    assert await store.get("b") is None
    assert await store.delete(["a", "b"]) == 1 and await store.get("a") is None


async def test_expired_entries_vanish():
    store = MemoryStore()
    await store.put(entry("a", ttl=-1))
    await store.put(entry("b", ttl=60, semantic=True))
    assert await store.get("a") is None
    assert [m["key"] for m in await store.metas()] == ["b"]
    assert [e.key for e in await store.index_snapshot()] == ["b"]


async def test_bounded_store_evicts_the_soonest_to_expire():
    store = MemoryStore(max_entries=2)
    for key, ttl in (("short", 10), ("long", 100), ("mid", 50)):
        await store.put(entry(key, ttl))
    assert len(store) == 2 and await store.get("short") is None
