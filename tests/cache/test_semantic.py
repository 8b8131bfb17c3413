"""The semantic cache asks the embedder whether one swapped word is a synonym."""


from cache.keys import CacheRequest
from cache.settings import CacheSettings

S = CacheSettings(route="r", semantic_enabled=True)


def ask(text: str) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=[{"role": "user", "content": text}],
                        params={"temperature": 0})


async def test_a_synonym_swap_is_served_and_a_sibling_swap_is_not(cache):
    await cache.store(ask("Can I fit a sofa in the moving van?"), {"content": "A"}, S)
    await cache.store(ask("Can I bring my cat on the train?"), {"content": "B"}, S)
    hit = await cache.lookup(ask("Can I fit a couch in the moving van?"), S)
    assert hit.status == "semantic" and hit.answer == {"content": "A"}
    assert (await cache.lookup(ask("Can I bring my dog on the train?"), S)).status == "miss"


async def test_verify_without_a_swap_makes_no_extra_embedding_call(cache):
    calls = []
    real = cache.semantic.embedder

    class Counting:
        async def embed(self, texts):
            calls.append(list(texts))
            return await real.embed(texts)

    cache.semantic.embedder = Counting()
    verdict = await cache.semantic.verify("How do I reset my password?",
                                          "how do i reset my password", 0.99, 0.78)
    assert verdict.ok and calls == []
    # WordNet does not pair "huge"/"enormous" (sister satellites of "large"); their own
    # embeddings do (0.85)
    verdict = await cache.semantic.verify("Why is my phone bill huge this month?",
                                          "Why is my phone bill enormous this month?", 0.94, 0.78)
    assert verdict.ok and calls == [["huge", "enormous"]]
    verdict = await cache.semantic.verify("What's the easiest way to learn Spanish?",
                                          "What's the simplest way to learn Spanish?", 0.97, 0.78)
    assert not verdict.ok  # 0.70 apart: not close enough to read as a synonym


async def test_the_learned_verifier_serves_a_rewording_under_the_bar_only_when_on(cache):
    from dataclasses import replace

    on, off = replace(S, verifier=True), S
    await cache.store(ask("What should I pack for a cold climate?"), {"content": "A"}, S)
    reworded = ask("What clothes should I bring somewhere freezing?")  # cosine 0.71, under 0.78
    assert (await cache.lookup(reworded, off)).status == "miss"
    hit = await cache.lookup(reworded, on)
    assert hit.status == "semantic" and hit.answer == {"content": "A"}
    # a different question in other words is still turned down
    assert (await cache.lookup(ask("What should I pack for a hot climate?"), on)) \
        .status == "miss"
