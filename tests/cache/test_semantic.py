"""The semantic cache: candidates over the floor go to the guard nearest first, route-wide
entries answer tenants, and `semantic` context mode reads earlier turns by meaning."""

from dataclasses import replace

from cache.keys import CacheRequest
from cache.settings import CacheSettings

S = CacheSettings(route="r", semantic_enabled=True)
EASY = replace(S, verifier_threshold=0.3)  # an operating point that serves more (mechanics)


def ask(text: str, history: list | None = None, **kw) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=(history or []) + [
        {"role": "user", "content": text}], params={"temperature": 0}, **kw)


async def test_a_candidate_is_served_at_or_over_the_threshold_and_counted_under_it(cache):
    await cache.store(ask("How do I lock my card?"), {"content": "A"}, S)
    hit = await cache.lookup(ask("Where can I lock my card?"), EASY)
    assert (hit.status, hit.answer) == ("semantic", {"content": "A"})
    assert hit.score is not None and hit.score >= 0.3
    strict = replace(S, verifier_threshold=min(1.0, hit.score + 0.01))
    miss = await cache.lookup(ask("Where can I lock my card?"), strict)
    assert miss.status == "miss" and cache.stats.get("r").guard_rejections == 1


async def test_the_nearest_passing_candidate_is_served(cache):
    await cache.store(ask("What is the capital of Peru?"), {"content": "Lima"}, S)
    await cache.store(ask("What is the population of Peru?"), {"content": "34 million"}, S)
    hit = await cache.lookup(ask("Which city is the capital of Peru?"), EASY)
    assert hit.answer == {"content": "Lima"}


async def test_with_the_guard_off_the_cosine_alone_decides_at_its_own_bar(cache):
    off = replace(S, guard=False)
    assert off.floor == 0.9
    await cache.store(ask("cancel my subscription"), {"content": "A"}, off)
    assert (await cache.lookup(ask("do NOT cancel my subscription"), off)).status == "semantic"
    assert (await cache.lookup(ask("do NOT cancel my subscription"), S)).status == "miss"


async def test_a_repeat_that_reads_the_same_is_served_without_an_embedding(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    embedder = cache.semantic.embedder
    calls = []
    embed = embedder.embed

    async def counted(texts):
        calls.append(list(texts))
        return await embed(texts)

    embedder.embed = counted
    try:
        hit = await cache.lookup(ask("um, how can i cancel my subscription"), S)
        assert (hit.status, hit.answer, hit.similarity) == ("semantic", {"content": "A"}, None)
        assert calls == []  # found by its normal form
        await cache.lookup(ask("Where do I cancel my subscription?"), S)  # read by meaning
        assert calls == [["Where do I cancel my subscription?"]]
    finally:
        embedder.embed = embed


async def test_a_curated_entry_without_a_tenant_is_a_candidate_for_every_tenant(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    for tenant in ("a", "b"):
        hit = await cache.lookup(ask("how do i cancel my subscription", tenant=tenant), S)
        assert (hit.status, hit.answer) == ("semantic", {"content": "A"})


async def test_semantic_context_reads_earlier_turns_by_meaning_and_keeps_others_apart(cache):
    sem = replace(EASY, context="semantic")
    plan = [{"role": "user", "content": "I pay 30 pounds a month for the Nimbus broadband plan."},
            {"role": "assistant", "content": "How can I help?"}]
    reworded = [{"role": "user", "content": "My Nimbus broadband plan costs 30 pounds monthly."},
                {"role": "assistant", "content": "Sure, what do you need?"}]
    gym = [{"role": "user", "content": "I pay 30 pounds a month for my gym membership."},
           {"role": "assistant", "content": "How can I help?"}]
    await cache.store(ask("How do I cancel it?", plan), {"content": "Nimbus"}, sem)
    assert (await cache.lookup(ask("How do I cancel it?", reworded), sem)).status == "semantic"
    assert (await cache.lookup(ask("How do I cancel it?", gym), sem)).status == "miss"
    assert (await cache.lookup(ask("How do I cancel it?", reworded), EASY)).status == "miss"
