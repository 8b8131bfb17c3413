"""The Redis store: shared entries and index across replicas, TTLs in Redis, outages."""

import asyncio
import time

import pytest

from cache.keys import CacheRequest
from cache.question import form_key, key_words
from cache.response_cache import ResponseCache
from cache.settings import CacheSettings
from cache.stores.base import CacheEntry, StoreUnavailable
from cache.stores.redis_store import RedisStore

S = CacheSettings(route="r", exact_enabled=True, semantic_enabled=True, threshold=0.85)


def ask(text: str) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=[{"role": "user", "content": text}],
                        params={"temperature": 0})


async def wait_for(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_entries_live_in_redis_with_ttls(redis_server):
    store = await RedisStore.open(redis_server.url, prefix="t1:")
    now = time.time()
    await store.put(CacheEntry("k", "r", {"content": "x"}, created_at=now,
                               exact_expires_at=now + 30))
    assert (await store.get("k")).answer == {"content": "x"}
    ttl = await store.client.pttl("t1:e:k")
    assert 25_000 < ttl <= 30_000
    assert await store.delete(["k"]) == 1 and await store.get("k") is None
    await store.close()


async def test_two_replicas_serve_each_others_entries(redis_server):
    a = await ResponseCache.open(redis_server.url, prefix="t2:")
    b = await ResponseCache.open(redis_server.url, prefix="t2:", embedder=a.semantic.embedder)
    try:
        await a.store(ask("How do I close my account?"), {"content": "A"}, S)
        assert (await b.lookup(ask("How do I close my account?"), S)).status == "exact"
        await wait_for(lambda: len(b.semantic.index) == 1)
        # the writer's normal form travels with the entry: b finds the repeat unembedded
        repeat = await b.lookup(ask("how can i close my account"), S)
        assert (repeat.status, repeat.similarity) == ("semantic", None)
        # a restarted replica loads the index from Redis, normal forms included
        c = await ResponseCache.open(redis_server.url, prefix="t2:", embedder=a.semantic.embedder)
        assert len(c.semantic.index) == 1
        part = c.semantic.partitions(ask("How do I close my account?"), S)[0]
        assert len(c.semantic.index.same_text(part, form_key("how can I close my account"))) == 1
        words = key_words("What are the steps to close my account?")  # and by key words
        assert c.semantic.index.lexical(part, words, 1.0).question == "How do I close my account?"
        await c.close()
        # a purge on one replica leaves the other's index
        assert await b.purge(route="r") == 1
        await wait_for(lambda: len(a.semantic.index) == 0)
    finally:
        await a.close()
        await b.close()


async def test_redis_down_is_a_miss_and_the_cache_resumes(fresh_redis):
    cache = await ResponseCache.open(fresh_redis.url, prefix="t3:")
    try:
        await cache.store(ask("What are your opening hours?"), {"content": "9-5"}, S)
        fresh_redis.stop()
        t0 = time.perf_counter()
        miss = await cache.lookup(ask("What are your opening hours?"), S)
        assert miss.status == "miss" and miss.error
        assert time.perf_counter() - t0 < 2.0
        assert not await cache.store(ask("new question"), {"content": "x"}, S)
        assert cache.stats.get("r").store_errors >= 2
        with pytest.raises(StoreUnavailable):  # fails fast while backing off
            await cache.backend.get("anything")
        fresh_redis.start()  # same port, empty
        await asyncio.sleep(0.6)  # past the back-off
        stored = False
        deadline = time.monotonic() + 5
        while not stored and time.monotonic() < deadline:
            stored = await cache.store(ask("What are your opening hours?"), {"content": "9-6"}, S)
            await asyncio.sleep(0.1)
        assert stored
        hit = await cache.lookup(ask("What are your opening hours?"), S)
        assert hit.status == "exact" and hit.answer == {"content": "9-6"}
        await wait_for(lambda: len(cache.semantic.index) == 1)
        assert (await cache.lookup(ask("what are your opening hours"), S)).status == "semantic"
    finally:
        await cache.close()


async def test_feed_events_carry_only_the_key(redis_server):
    a = await ResponseCache.open(redis_server.url, prefix="t5:")
    b = await ResponseCache.open(redis_server.url, prefix="t5:", embedder=a.semantic.embedder)
    try:
        await a.store(ask("Where is my parcel?"), {"content": "On its way"}, S)
        [(_, fields)] = await a.backend.client.xrange("t5:ix")
        assert set(fields) == {"op", "key"} and fields["op"] == "put"
        await wait_for(lambda: len(b.semantic.index) == 1)  # b read the vector from the entry
        assert (await b.lookup(ask("where is my parcel"), S)).status == "semantic"
    finally:
        await a.close()
        await b.close()
