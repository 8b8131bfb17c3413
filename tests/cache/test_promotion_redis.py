"""Judgements on a real Redis shared by two replicas: an alias, an entry's evidence and its
refusals reach the other replica's index through the feed, as entries do; a purge on one
replica removes the aliases everywhere; an alias expires with its entry in Redis."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from cache.judging import judge_pair
from cache.keys import exact_key
from cache.question import form_key
from cache.response_cache import ResponseCache
from tests.cache.grey_pairs import CAPITAL, SEAT, SEAT_AGAIN, S, Scripted, ask, grey_miss
from tests.cache.test_redis_store import wait_for


async def replicas(url: str, prefix: str) -> tuple[ResponseCache, ResponseCache]:
    a = await ResponseCache.open(url, prefix=prefix)
    b = await ResponseCache.open(url, prefix=prefix, embedder=a.semantic.embedder)
    return a, b


async def test_an_alias_made_on_one_replica_serves_on_the_other(redis_server):
    a, b = await replicas(redis_server.url, "j1:")
    try:
        await a.store(ask(CAPITAL), {"content": "Canberra"}, S)
        assert (await judge_pair(a, await grey_miss(a, SEAT), Scripted(True))).status == \
            "promoted"
        found = await b.lookup(ask(SEAT), S)  # the alias's exact key, read from Redis
        assert (found.status, found.answer) == ("exact", {"content": "Canberra"})
        alias_key = exact_key(ask(SEAT))
        await wait_for(lambda: (e := b.semantic.index.get(alias_key)) is not None
                       and e.alias_of == exact_key(ask(CAPITAL)))
        near = await b.lookup(ask(SEAT_AGAIN), S)
        assert (near.status, near.answer) == ("semantic", {"content": "Canberra"})
    finally:
        await a.close()
        await b.close()


async def test_evidence_and_refusals_reach_the_other_replica(redis_server):
    a, b = await replicas(redis_server.url, "j2:")
    try:
        await a.store(ask(CAPITAL), {"content": "Canberra"}, S)
        key = exact_key(ask(CAPITAL))
        await wait_for(lambda: key in b.semantic.index)
        assert (await judge_pair(a, await grey_miss(a, SEAT), Scripted(False))).status == \
            "refused"
        await wait_for(lambda: (e := b.semantic.index.get(key)) is not None
                       and e.evidence is not None)
        evidence = b.semantic.index.get(key).evidence
        assert (evidence.said_yes, evidence.said_no) == (0, 1)
        assert evidence.refuses(form_key(SEAT))
        assert (await b.backend.get(key)).evidence == evidence
    finally:
        await a.close()
        await b.close()


async def test_a_purge_on_one_replica_removes_the_aliases_from_every_index(redis_server):
    a, b = await replicas(redis_server.url, "j3:")
    try:
        await a.store(ask(CAPITAL, namespace="geo"), {"content": "Canberra"}, S)
        await judge_pair(a, await grey_miss(a, SEAT, namespace="geo"), Scripted(True))
        await wait_for(lambda: len(b.semantic.index) == 2)
        assert await b.purge(key=exact_key(ask(CAPITAL, namespace="geo"))) == 2
        await wait_for(lambda: len(a.semantic.index) == 0)
        for replica in (a, b):
            assert (await replica.lookup(ask(SEAT, namespace="geo"), S)).status == "miss"
    finally:
        await a.close()
        await b.close()


async def test_an_alias_expires_in_redis_with_its_entry(redis_server):
    a = await ResponseCache.open(redis_server.url, prefix="j4:")
    try:
        short = replace(S, exact_ttl_s=1.0, semantic_ttl_s=1.0)
        await a.store(ask(CAPITAL), {"content": "Canberra"}, short)
        await judge_pair(a, await grey_miss(a, SEAT), Scripted(True))
        assert 0 < await a.backend.client.pttl(f"j4:e:{exact_key(ask(SEAT))}") <= 1000
        await asyncio.sleep(1.1)
        assert (await a.lookup(ask(SEAT), S)).status == "miss"
        assert exact_key(ask(SEAT)) not in a.semantic.index
    finally:
        await a.close()
