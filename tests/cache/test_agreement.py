"""The `agreement` judge (cache/agreement.py): the entry's answer against the fresh one, the
facts they name first, then their embeddings' cosine."""

from __future__ import annotations

import pytest

from cache.agreement import AgreementJudge
from cache.embedder import Embedder
from cache.grey import GreyCandidate, GreyPair
from cache.keys import CacheRequest
from cache.settings import CacheSettings
from cache.stores.base import CacheEntry

S = CacheSettings(route="r", semantic_enabled=True, judge="agreement")
CANBERRA = "The capital of Australia is Canberra, chosen in 1908 as a compromise."


def pair(fresh: str) -> GreyPair:
    req = CacheRequest(route="r", model="m", params={"temperature": 0},
                       messages=[{"role": "user", "content": "Which city is the capital?"}])
    return GreyPair(req, S, GreyCandidate("k", "What is the capital of Australia?", 0.5),
                    {"content": fresh})


def entry(answer: str) -> CacheEntry:
    return CacheEntry(key="k", route="r", answer={"content": answer})


@pytest.fixture(scope="module")
def judge() -> AgreementJudge:
    return AgreementJudge(Embedder.shared())


@pytest.mark.parametrize(("cached", "fresh", "reason"), [
    (CANBERRA, "The capital of Australia is Canberra, picked in 1913.", "numbers"),
    ("Boil it for six minutes.", "Boil it for nine minutes.", "numbers"),
    ("The office is closed on Monday.", "The office is closed on Friday.", "dates"),
    ("Take flight BA117 from gate 4.", "Take flight BA118 from gate 4.", "identifiers"),
    ("Run it with the v2 API key.", "Run it with the v3 API key.", "identifiers"),
    (CANBERRA, "", "empty"),
])
async def test_answers_that_disagree_on_a_fact_are_a_no(judge, cached, fresh, reason):
    verdict = await judge(pair(fresh), entry(cached))
    assert (verdict.same, verdict.reason, verdict.judge) == (False, reason, "agreement")


async def test_answers_worded_alike_agree(judge):
    verdict = await judge(pair("Canberra is the capital of Australia; it was chosen in 1908 "
                               "as a compromise."), entry(CANBERRA))
    assert (verdict.same, verdict.reason) == (True, "agreed")
    assert verdict.similarity is not None and verdict.similarity >= judge.floor


async def test_answers_about_other_things_are_dissimilar(judge):
    verdict = await judge(pair("Preheat the oven before you bake the bread for 1908 seconds."),
                          entry(CANBERRA))
    assert (verdict.same, verdict.reason) == (False, "dissimilar")
    assert verdict.similarity is not None and verdict.similarity < judge.floor
