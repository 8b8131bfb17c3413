"""Judgements applied (cache/promotion.py) over the memory store: a "yes" makes the question
an alias of the entry in its own scope, a "no" refuses it; TTLs and purges hold for
aliases; every judgement is a labelled pair."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from cache.eval import load_pairs
from cache.grey import GreyPair
from cache.judging import judge_pair
from cache.keys import CacheRequest, exact_key
from tests.cache.grey_pairs import CAPITAL, SEAT, SEAT_AGAIN, S, Scripted, ask, grey_miss


async def test_yes_makes_the_question_an_alias_serving_the_entrys_answer(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    outcome = await judge_pair(cache, await grey_miss(cache, SEAT), Scripted(True))
    assert outcome.status == "promoted" and outcome.score is not None
    again = await cache.lookup(ask(SEAT), S)  # its exact key now points at the entry's answer
    assert (again.status, again.answer) == ("exact", {"content": "Canberra"})
    near = await cache.lookup(ask(SEAT_AGAIN), S)  # a close rewording finds the alias
    assert (near.status, near.answer) == ("semantic", {"content": "Canberra"})
    alias = await cache.backend.get(exact_key(ask(SEAT)))
    assert alias.alias_of == exact_key(ask(CAPITAL)) and alias.source == "alias"
    entry = await cache.backend.get(exact_key(ask(CAPITAL)))
    assert (entry.evidence.said_yes, entry.evidence.said_no) == (1, 0)
    assert cache.stats.get("r").promotions == 1


async def test_no_refuses_the_question_and_keeps_its_own_answer(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    outcome = await judge_pair(cache, await grey_miss(cache, SEAT), Scripted(False))
    assert outcome.status == "refused"
    entry = await cache.backend.get(exact_key(ask(CAPITAL)))
    assert (entry.evidence.said_yes, entry.evidence.said_no) == (0, 1)
    again = await cache.lookup(ask(SEAT), S)
    assert (again.status, again.answer) == ("exact", {"content": f"fresh answer to {SEAT}"})
    assert cache.stats.get("r").refusals == 1


async def test_an_alias_expires_with_its_entry(cache):
    short = replace(S, semantic_ttl_s=0.5, exact_ttl_s=0.5)
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, short)
    pair = await grey_miss(cache, SEAT, replace(short, semantic_ttl_s=60, exact_ttl_s=60))
    await judge_pair(cache, pair, Scripted(True))
    alias = await cache.backend.get(exact_key(ask(SEAT)))
    entry = await cache.backend.get(exact_key(ask(CAPITAL)))
    assert alias.expires_at <= entry.expires_at
    await asyncio.sleep(0.6)
    assert (await cache.lookup(ask(SEAT), S)).status == "miss"
    assert (await cache.lookup(ask(SEAT_AGAIN), S)).status == "miss"


async def test_purging_an_entry_purges_its_aliases(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    await judge_pair(cache, await grey_miss(cache, SEAT), Scripted(True))
    assert await cache.purge(key=exact_key(ask(CAPITAL))) == 2
    assert (await cache.lookup(ask(SEAT), S)).status == "miss"
    assert len(cache.semantic.index) == 0


async def test_purging_a_namespace_purges_its_aliases(cache):
    await cache.store(ask(CAPITAL, namespace="geo"), {"content": "Canberra"}, S)
    await judge_pair(cache, await grey_miss(cache, SEAT, namespace="geo"), Scripted(True))
    assert await cache.purge(namespace="geo") == 2
    assert (await cache.lookup(ask(SEAT, namespace="geo"), S)).status == "miss"


async def test_an_alias_serves_its_own_scope_only(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra, for everyone"}, S)  # route-wide
    await judge_pair(cache, await grey_miss(cache, SEAT, tenant="a"), Scripted(True))
    mine = await cache.lookup(ask(SEAT, tenant="a"), S)
    assert (mine.status, mine.answer) == ("exact", {"content": "Canberra, for everyone"})
    for other in (ask(SEAT, tenant="b"), ask(SEAT_AGAIN, tenant="b"),
                  ask(SEAT, tenant="a", namespace="n"), ask(SEAT, tenant="a", route="r2"),
                  ask(SEAT_AGAIN, tenant="a", route="r2")):
        found = await cache.lookup(other, replace(S, route=other.route))
        assert found.answer is None, other


async def test_an_alias_never_crosses_contexts(cache):
    system = [{"role": "system", "content": "You answer for the Australian embassy."}]
    with_system = CacheRequest(route="r", model="m", params={"temperature": 0},
                               messages=system + [{"role": "user", "content": CAPITAL}])
    await cache.store(with_system, {"content": "Canberra"}, S)
    seat = replace(with_system, messages=system + [{"role": "user", "content": SEAT}])
    found = await cache.lookup(seat, S)
    await cache.store(seat, {"content": "fresh"}, S, vector=found.vector)
    await judge_pair(cache, GreyPair(seat, S, found.grey, {"content": "fresh"}, found.vector),
                     Scripted(True))
    assert (await cache.lookup(seat, S)).answer == {"content": "Canberra"}
    for plain in (ask(SEAT), ask(SEAT_AGAIN)):  # the same words without the system prompt
        assert (await cache.lookup(plain, S)).answer is None


async def test_every_judgement_is_a_labelled_pair_eval_cache_reads(cache, tmp_path):
    logged = replace(S, labels=str(tmp_path / "labels" / "r.jsonl"))
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, logged)
    await judge_pair(cache, await grey_miss(cache, SEAT, logged), Scripted(True))
    [line] = load_pairs(tmp_path / "labels" / "r.jsonl")
    assert (line["a"], line["b"], line["same_answer"]) == (CAPITAL, SEAT, True)
    assert line["category"] == "judged:scripted:yes" and line["id"].startswith("judged-r-")
    assert json.loads(json.dumps(line)) == line
