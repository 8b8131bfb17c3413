"""Exact + semantic caches over the memory store: isolation, TTLs, stats, purge."""

import asyncio
from dataclasses import replace

from cache.keys import CacheRequest
from cache.settings import CacheSettings

S = CacheSettings(route="r", exact_enabled=True, semantic_enabled=True, threshold=0.85)


def ask(text: str, history: list | None = None, **kw) -> CacheRequest:
    params = {"temperature": 0, **kw.pop("params", {})}
    msgs = (history or []) + [{"role": "user", "content": text}]
    return CacheRequest(route=kw.pop("route", "r"), model="m", messages=msgs, params=params, **kw)


async def test_exact_then_semantic_then_guarded_miss(cache):
    assert await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    assert (await cache.lookup(ask("How do I cancel my subscription?"), S)).status == "exact"
    hit = await cache.lookup(ask("how can i cancel my subscription"), S)
    assert hit.status == "semantic" and hit.answer == {"content": "A"}
    assert (await cache.lookup(ask("How do I NOT cancel my subscription?"), S)).status == "miss"
    stats = cache.stats.get("r")
    assert (stats.exact_hits, stats.semantic_hits, stats.misses) == (1, 1, 1)
    assert stats.guard_rejections == 1


async def test_tenants_and_namespaces_never_share(cache):
    await cache.store(ask("What is the refund policy?", tenant="a"), {"content": "A"}, S)
    for other in (ask("What is the refund policy?", tenant="b"),
                  ask("What is the refund policy?"),
                  ask("What is the refund policy?", tenant="a", namespace="n")):
        assert (await cache.lookup(other, S)).status == "miss"
    assert (await cache.lookup(ask("What is the refund policy?", tenant="a"), S)).status == "exact"


async def test_multi_turn_conversations_never_share(cache):
    netflix = [{"role": "user", "content": "I have a Netflix plan"},
               {"role": "assistant", "content": "Cancel or change it?"}]
    gym = [{"role": "user", "content": "I have a gym membership"},
           {"role": "assistant", "content": "Cancel or change it?"}]
    await cache.store(ask("yes, cancel it", netflix), {"content": "Netflix cancelled"}, S)
    assert (await cache.lookup(ask("yes, cancel it", gym), S)).status == "miss"
    assert (await cache.lookup(ask("yes cancel it", netflix), S)).status == "semantic"
    assert (await cache.lookup(ask("yes, cancel it"), S)).status == "miss"


async def test_ttl_and_max_age(cache):
    short = replace(S, exact_ttl_s=0.2, semantic_ttl_s=0.2)
    await cache.store(ask("Where is my parcel?"), {"content": "A"}, short)
    assert (await cache.lookup(ask("Where is my parcel?"), short)).status == "exact"
    assert (await cache.lookup(ask("Where is my parcel?"), short, max_age_s=0)).status == "miss"
    await asyncio.sleep(0.3)
    assert (await cache.lookup(ask("Where is my parcel?"), short)).status == "miss"
    assert (await cache.lookup(ask("where is my parcel"), short)).status == "miss"
    assert len(cache.semantic.index) == 0


async def test_only_cacheable_requests_use_the_semantic_cache(cache):
    hot = ask("How do I reset my password?", params={"temperature": 1.5})
    assert await cache.store(hot, {"content": "A"}, S)  # exact still stores it
    assert len(cache.semantic.index) == 0
    tools = ask("How do I reset my password?", params={"tools": [{"type": "function"}]})
    await cache.store(tools, {"content": "A"}, S)
    assert len(cache.semantic.index) == 0
    await cache.store(tools, {"content": "A"}, replace(S, allow_tools=True))
    assert len(cache.semantic.index) == 1
    off = replace(S, exact_enabled=False, semantic_enabled=False)
    found = await cache.lookup(ask("x"), off)
    assert (found.status, found.skipped) == ("bypass", "disabled")
    found = await cache.lookup(hot, replace(S, exact_enabled=False))
    assert (found.status, found.skipped) == ("bypass", "temperature")
    found = await cache.lookup(ask("How do I reset my password?", params={"temperature": 1.5,
                                                                         "seed": 1}), S)
    assert (found.status, found.skipped) == ("miss", "semantic:temperature")
    found = await cache.lookup(ask("How do I reset my password?"), S)  # at temperature 0
    assert found.status == "miss" and found.skipped is None  # both lookups ran


async def test_an_entry_without_a_tenant_serves_every_tenant_and_a_tenants_only_its_own(cache):
    await cache.store(ask("What are your opening hours?"), {"content": "9-5"}, S)
    await cache.store(ask("Where is your shop?", tenant="a"), {"content": "A st"}, S)
    for tenant in ("a", "b"):
        assert (await cache.lookup(ask("What are your opening hours?", tenant=tenant),
                                   S)).answer == {"content": "9-5"}
    assert (await cache.lookup(ask("Where is your shop?", tenant="b"), S)).status == "miss"
    assert (await cache.lookup(ask("Where is your shop?", tenant="a"), S)).status == "exact"


async def test_a_complete_answer_serves_any_limit_it_fits_in(cache):
    answer = {"content": "Paris.", "finish_reason": "stop", "usage": {"completion_tokens": 3}}
    await cache.store(ask("What is the capital of France?"), answer, S)
    for limit, status in ((8, "exact"), (3, "exact"), (2, "miss"), (None, "exact")):
        params = {} if limit is None else {"max_tokens": limit}
        assert (await cache.lookup(ask("What is the capital of France?", params=params),
                                   S)).status == status


async def test_a_route_without_semantic_hits_skips_lookups_but_probes(cache):
    cache.skip.window, cache.skip.probe_every = 5, 3
    s = replace(S, exact_enabled=True)
    for i in range(5):
        assert (await cache.lookup(ask(f"unrelated question number {i}"), s)).skipped is None
    found = [await cache.lookup(ask(f"another question {i}"), s) for i in range(3)]
    assert [f.skipped for f in found] == ["semantic:idle", "semantic:idle", None]  # a probe
    assert cache.stats.get("r").semantic_skips == 2
    assert found[2].vector is not None  # embedded though its partition holds nothing:
    for i, f in enumerate(found):  # while skipping, only a store with its vector at hand
        await cache.store(ask(f"another question {i}"), {"content": "A"}, s, vector=f.vector)
    assert len(cache.semantic.index) == 1  # indexes it: the probe's


async def test_a_store_in_flight_is_waited_for_by_a_lookup_of_its_key(cache):
    task = cache.store_soon(ask("Where is my parcel?"), {"content": "A"}, S)
    assert not task.done()
    assert (await cache.lookup(ask("Where is my parcel?"), S)).status == "exact"
    assert task.done() and cache._pending == {}


async def test_purge_by_route_namespace_and_key(cache):
    await cache.store(ask("q1"), {"content": "1"}, S)
    await cache.store(ask("q2", namespace="faq"), {"content": "2"}, S)
    r2 = replace(S, route="r2")
    await cache.store(ask("q3", route="r2"), {"content": "3"}, r2)
    assert await cache.entry_counts() == {"r": 2, "r2": 1}
    assert await cache.purge(namespace="faq") == 1
    assert await cache.purge(route="r2") == 1
    key = (await cache.lookup(ask("q1"), S)).key
    assert await cache.purge(key=key) == 1
    assert await cache.entry_counts() == {} and len(cache.semantic.index) == 0
