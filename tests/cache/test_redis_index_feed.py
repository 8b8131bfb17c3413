"""The semantic index's change feed on Redis Streams at scale: a replica whose cursor was
trimmed away reloads from the snapshot, and a renewed TTL reaches every replica's index."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np

from cache.response_cache import ResponseCache
from cache.stores.base import CacheEntry
from cache.stores.redis_store import RedisStore
from tests.cache.test_redis_store import S, ask, wait_for


def semantic_entry(key: str, expires_in_s: float) -> CacheEntry:
    now = time.time()
    vector = np.zeros(384, dtype=np.float32)
    vector[hash(key) % 384] = 1.0
    return CacheEntry(key, "r", {"content": key}, created_at=now, partition="p",
                      question=f"question {key}?", vector=vector,
                      semantic_expires_at=now + expires_in_s)


async def test_a_replica_whose_cursor_was_trimmed_away_reloads(redis_server) -> None:
    writer = await RedisStore.open(redis_server.url, prefix="f1:")
    reader = await RedisStore.open(redis_server.url, prefix="f1:")
    try:
        await writer.put(semantic_entry("a", 60))
        assert [e.key for e in await reader.index_snapshot()] == ["a"]
        await writer.put(semantic_entry("b", 60))
        changes = await reader.index_changes()  # in step: b arrives (replacing any old b)
        assert [(e.op, e.key) for e in changes] == [("del", "b"), ("put", "b")]
        for key in "cdef":
            await writer.put(semantic_entry(key, 60))
        await writer.client.xtrim("f1:ix", maxlen=2, approximate=False)  # c and d are gone
        assert await reader.index_changes() is None  # so: reload
        snapshot = await reader.index_snapshot()
        assert sorted(e.key for e in snapshot) == list("abcdef")
        assert await reader.index_changes() == []
    finally:
        await writer.close()
        await reader.close()


async def test_an_untrimmed_feed_never_forces_a_reload(redis_server) -> None:
    writer = await RedisStore.open(redis_server.url, prefix="f2:")
    reader = await RedisStore.open(redis_server.url, prefix="f2:")
    try:
        assert await reader.index_snapshot() == []  # no feed yet
        await writer.put(semantic_entry("a", 60))
        await writer.client.xtrim("f2:ix", maxlen=5, approximate=False)  # trims nothing
        assert [(e.op, e.key) for e in await reader.index_changes()] == [("del", "a"),
                                                                         ("put", "a")]
    finally:
        await writer.close()
        await reader.close()


async def test_a_renewed_ttl_reaches_the_other_replicas_index(redis_server) -> None:
    a = await ResponseCache.open(redis_server.url, prefix="f3:")
    b = await ResponseCache.open(redis_server.url, prefix="f3:", embedder=a.semantic.embedder)
    try:
        short = dataclasses.replace(S, semantic_ttl_s=30.0)
        await a.store(ask("How do I renew my passport?"), {"content": "Online"}, short)
        await wait_for(lambda: len(b.semantic.index) == 1)
        (key,) = list(b.semantic.index._ids)
        first = b.semantic.index.get(key).expires_at
        await asyncio.sleep(0.05)
        await a.store(ask("How do I renew my passport?"), {"content": "Online"}, S)  # a day
        await wait_for(lambda: b.semantic.index.get(key) is not None
                       and b.semantic.index.get(key).expires_at > first + 3600)
        assert b.semantic.index.expire(now=first + 1) == 0  # the old expiry no longer applies
    finally:
        await a.close()
        await b.close()
