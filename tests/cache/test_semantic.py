"""The semantic cache: repeats found by normal form and rewordings by key words before any
embedding, candidates over the floor go to the guard nearest first (at most NEIGHBOURS
read), route-wide entries answer tenants, and `semantic` context mode reads earlier turns by
meaning."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from cache.keys import CacheRequest, exact_key
from cache.semantic import NEIGHBOURS
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


@contextmanager
def counted(obj, name: str) -> Iterator[list]:
    """Calls to `obj.name` (its first argument each), for as long as the block runs."""
    calls, real = [], getattr(obj, name)

    def spy(*args):
        calls.append(args[0] if not hasattr(args[0], "shape") else args[0].shape[0])
        return real(*args)

    setattr(obj, name, spy)
    try:
        yield calls
    finally:
        setattr(obj, name, real)


async def test_a_repeat_that_reads_the_same_is_served_without_an_embedding(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    with counted(cache.semantic.embedder, "embed") as calls:
        hit = await cache.lookup(ask("um, how can i cancel my subscription"), S)
        assert (hit.status, hit.answer, hit.similarity) == ("semantic", {"content": "A"}, None)
        assert calls == []  # found by its normal form
        await cache.lookup(ask("Where can I find my invoices?"), S)  # read by meaning
        assert calls == [["Where can I find my invoices?"]]


async def test_a_lookup_into_an_empty_partition_embeds_nothing_the_store_does(cache):
    with counted(cache.semantic.embedder, "embed") as calls:
        miss = await cache.lookup(ask("How do I cancel my subscription?"), S)
        assert (miss.status, miss.vector, calls) == ("miss", None, [])
        await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
        assert calls == [["How do I cancel my subscription?"]]  # once the answer is in
        other = await cache.lookup(ask("Where can I find my invoices?", tenant="t"), S)
        assert other.vector is not None and len(calls) == 2  # the route-wide entry counts


async def test_a_rewording_that_keeps_most_words_is_read_before_any_embedding(cache):
    await cache.store(ask("How do I cancel my subscription?"), {"content": "A"}, S)
    reworded = ask("What are the steps to cancel my subscription?")
    with counted(cache.semantic.embedder, "embed") as calls:
        hit = await cache.lookup(reworded, S)
        assert (hit.status, hit.answer, hit.similarity) == ("semantic", {"content": "A"}, None)
        assert hit.score is not None and calls == []  # verified; found by "cancel" and
        # "subscription", its only key words, both shared
        own_floor = await cache.lookup(reworded, replace(S, threshold=0.5))
        assert own_floor.status == "semantic" and own_floor.similarity is not None
        assert len(calls) == 1  # a route that set its own cosine floor: by cosine alone


async def test_a_near_miss_sharing_words_is_read_once_one_way_then_the_embedding_runs(cache):
    await cache.store(ask("How do I cancel my gym subscription?"), {"content": "A"}, S)
    model = cache.semantic.guard.model
    with counted(cache.semantic.embedder, "embed") as embeds, \
            counted(model, "model") as batches:
        alone = await cache.lookup(ask("How do I cancel my magazine subscription?"), S)
        assert alone.status == "miss" and embeds == []  # no other entry to look for
        await cache.store(ask("Where can I find my invoices?"), {"content": "B"}, S)
        miss = await cache.lookup(ask("How do I cancel my newspaper subscription?"), S)
    assert miss.status == "miss" and len(embeds) == 2  # the store's, then the lookup's
    assert batches == [1, 1]  # one row each: (gym, ...) read one way, not again by cosine
    assert cache.stats.get("r").guard_rejections == 2


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


async def test_at_most_neighbours_candidates_are_read_the_key_word_one_included(cache):
    # the first shares the most key words, the other three are nearer by cosine (0.89-0.92)
    for q in ("cancel magazine subscription refund policy", "How can I cancel my magazine "
              "membership 1?", "How do I stop my magazine subscription 1?",
              "How do I end my magazine subscription 1?"):
        await cache.store(ask(q), {"content": q}, S)
    miss = await cache.lookup(ask("How do I cancel my magazine subscription?"), S)
    assert miss.status == "miss" and cache.stats.get("r").guard_rejections == NEIGHBOURS


async def test_a_key_word_candidate_gone_from_the_store_leaves_the_others_to_cosine(cache):
    await cache.store(ask("How can I cancel my subscription?"), {"content": "A"}, S)
    gone = ask("How do I cancel my subscription?")  # the key-word candidate: the newer of two
    await cache.store(gone, {"content": "B"}, S)
    assert await cache.backend.delete([exact_key(gone)]) == 1  # lost by the store alone
    hit = await cache.lookup(ask("What are the steps to cancel my subscription?"), EASY)
    assert (hit.status, hit.answer) == ("semantic", {"content": "A"})  # found by cosine
    assert hit.similarity is not None and len(cache.semantic.index) == 1
