"""Query-aware selection: the relevant passages survive, in their original order."""

from __future__ import annotations

import numpy as np

from prompts.select import GAP, bm25_scores, select_passages, split_passages


def count(text: str) -> int:
    return len(text.split())


DOC = "\n\n".join([
    "Alpha paragraph about gardening and roses in spring.",
    "Bravo paragraph: the reactor coolant pressure limit is 155 bar.",
    "Charlie paragraph about football results last weekend.",
    "Delta paragraph: the reactor was commissioned in 1987.",
    "Echo paragraph on baking bread with sourdough.",
])


def test_split_respects_passage_size():
    long = " ".join(f"Sentence number {i} is here." for i in range(100))
    passages = split_passages(long, count, max_tokens=40)
    assert len(passages) > 5 and all(p.tokens <= 40 for p in passages)
    assert " ".join(p.text for p in passages) == long


def test_bm25_prefers_matching_passages():
    passages = split_passages(DOC, count, max_tokens=12)
    scores = bm25_scores("reactor coolant pressure", passages)
    assert max(range(len(scores)), key=scores.__getitem__) == 1


async def test_select_keeps_best_in_original_order():
    out = await select_passages(DOC, "What do we know about the reactor?", 20, count,
                                passage_tokens=12)
    assert "155 bar" in out and "1987" in out
    assert out.index("155 bar") < out.index("1987")  # original order
    assert "football" not in out and GAP in out


async def test_embeddings_fuse_with_lexical():
    async def embed(texts: list[str]) -> np.ndarray:  # a stand-in embedding: topic indicator
        vecs = np.array([[1.0, 0.0] if "reactor" in t or "nuclear" in t else [0.0, 1.0]
                         for t in texts])
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)

    out = await select_passages(DOC, "nuclear plant facts", 20, count, embed=embed,
                                passage_tokens=12)
    assert "155 bar" in out and "1987" in out


async def test_short_text_is_returned_unchanged():
    assert await select_passages(DOC, "q", 10_000, count) == DOC
