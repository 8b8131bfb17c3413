"""The semantic cache: candidates over the floor go to the guard nearest first, route-wide
entries answer tenants, and `semantic` context mode reads earlier turns by meaning."""

from dataclasses import replace

from cache.keys import CacheRequest
from cache.settings import CacheSettings

S = CacheSettings(route="r", semantic_enabled=True)


def ask(text: str, history: list | None = None, **kw) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=(history or []) + [
        {"role": "user", "content": text}], params={"temperature": 0}, **kw)


async def test_a_rewording_is_served_and_a_near_miss_is_counted_as_a_rejection(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    hit = await cache.lookup(ask("What's the way to end my subscription?"), S)
    assert (hit.status, hit.answer) == ("semantic", {"content": "A"})
    assert hit.score is not None and hit.score >= cache.semantic.guard.threshold()
    miss = await cache.lookup(ask("How do I renew my subscription?"), S)
    assert miss.status == "miss" and cache.stats.get("r").guard_rejections == 1


async def test_the_nearest_passing_candidate_is_served(cache):
    await cache.store(ask("What is the capital of Peru?"), {"content": "Lima"}, S)
    await cache.store(ask("What is the population of Peru?"), {"content": "34 million"}, S)
    hit = await cache.lookup(ask("Which city is the capital of Peru?"), S)
    assert hit.answer == {"content": "Lima"}


async def test_with_the_guard_off_the_cosine_alone_decides_at_its_own_bar(cache):
    off = replace(S, guard=False)
    assert off.floor == 0.9
    await cache.store(ask("How do I lock my card?"), {"content": "A"}, off)
    assert (await cache.lookup(ask("How do I unlock my card?"), off)).status == "semantic"
    assert (await cache.lookup(ask("How do I unlock my card?"), S)).status == "miss"


async def test_a_curated_entry_without_a_tenant_is_a_candidate_for_every_tenant(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    for tenant in ("a", "b"):
        hit = await cache.lookup(ask("how do i cancel my subscription", tenant=tenant), S)
        assert (hit.status, hit.answer) == ("semantic", {"content": "A"})


async def test_semantic_context_reads_earlier_turns_by_meaning_and_keeps_others_apart(cache):
    sem = replace(S, context="semantic")
    plan = [{"role": "user", "content": "I pay 30 pounds a month for the Nimbus broadband plan."},
            {"role": "assistant", "content": "How can I help?"}]
    reworded = [{"role": "user", "content": "My Nimbus broadband plan costs 30 pounds monthly."},
                {"role": "assistant", "content": "Sure, what do you need?"}]
    gym = [{"role": "user", "content": "I pay 30 pounds a month for my gym membership."},
           {"role": "assistant", "content": "How can I help?"}]
    await cache.store(ask("How do I cancel it?", plan), {"content": "Nimbus"}, sem)
    assert (await cache.lookup(ask("How do I cancel it?", reworded), sem)).status == "semantic"
    assert (await cache.lookup(ask("How do I cancel it?", gym), sem)).status == "miss"
    assert (await cache.lookup(ask("How do I cancel it?", reworded), S)).status == "miss"
