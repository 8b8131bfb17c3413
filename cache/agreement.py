"""The `agreement` judge: the entry's answer against the fresh answer the upstream just gave
to the new question.

A grey-zone miss was answered upstream anyway, so the gateway holds both answers. Two
answers to one question may be worded apart, but they name the same facts: the exact checks
on numbers (by value), dates and identifiers come first (`checks.answer_clash`: a clash when
neither side's set holds the other's), then the two answers' embeddings must reach a cosine
floor. Either failing is a "no". It costs no upstream call, only an embedding of the two
answers, and is only as good as the upstream is consistent: two answers of a model that
words each reply its own way rarely reach the floor (then it promotes little, and errs on
the side of a miss).
"""

from __future__ import annotations

import numpy as np

from cache.checks import answer_clash
from cache.grey import GreyPair
from cache.judgement import Judgement, answer_text
from cache.stores.base import CacheEntry

SIMILARITY_FLOOR = 0.97  # cosine (all-MiniLM-L6-v2) two answers need to agree


class AgreementJudge:
    """`judge(pair, entry)`: "yes" when the two answers agree on every fact they name and
    their embeddings reach `floor`."""

    name = "agreement"

    def __init__(self, embedder, floor: float = SIMILARITY_FLOOR) -> None:
        self.embedder, self.floor = embedder, floor

    async def __call__(self, pair: GreyPair, entry: CacheEntry) -> Judgement:
        cached, fresh = answer_text(entry.answer), answer_text(pair.answer)
        if not cached.strip() or not fresh.strip():
            return Judgement(False, self.name, "empty")
        if (found := answer_clash(cached, fresh)) is not None:
            return Judgement(False, self.name, found.reason)  # type: ignore[arg-type]
        vectors = np.asarray(await self.embedder.embed([cached, fresh]))
        cosine = round(float(vectors[0] @ vectors[1]), 4)
        agreed = cosine >= self.floor
        return Judgement(agreed, self.name, "agreed" if agreed else "dissimilar", cosine)
