"""Judging one grey-zone pair (cache/judging.py): read again in both orders, the entry as
stored now, the judge asked; every way it can end, each with its reason."""

from __future__ import annotations

from cache.grey import GreyCandidate, GreyPair
from cache.judging import judge_pair
from cache.keys import exact_key
from tests.cache.grey_pairs import CAPITAL, SEAT, S, Scripted, ask, grey_miss

CANCEL = "How do I cancel my subscription?"
PAUSE = "How do I pause my subscription?"  # against CANCEL: about 0.002 in both orders


async def test_a_judge_that_fails_changes_nothing_but_the_error_count(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    outcome = await judge_pair(cache, await grey_miss(cache, SEAT), Scripted(None))
    assert outcome.status == "no_verdict" and outcome.judgement is None
    assert (await cache.backend.get(exact_key(ask(CAPITAL)))).evidence is None
    again = await cache.lookup(ask(SEAT), S)
    assert again.answer == {"content": f"fresh answer to {SEAT}"}
    counters = cache.stats.get("r")
    assert (counters.promotions, counters.refusals, counters.judge_errors) == (0, 0, 1)


async def test_a_judge_that_raises_gives_no_verdict(cache):
    class Broken:
        name = "broken"

        async def __call__(self, pair, entry):  # noqa: ANN001
            raise RuntimeError("judge crashed")

    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    outcome = await judge_pair(cache, await grey_miss(cache, SEAT), Broken())
    assert outcome.status == "no_verdict"


async def test_an_entry_gone_before_its_judgement_is_not_judged(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    pair = await grey_miss(cache, SEAT)
    assert await cache.purge(key=exact_key(ask(CAPITAL))) == 1
    judge = Scripted(True)
    assert (await judge_pair(cache, pair, judge)).status == "gone"
    assert judge.asked == 0


async def test_a_pair_under_the_floor_in_both_orders_is_not_judged(cache):
    await cache.store(ask(CANCEL), {"content": "Settings > Cancel"}, S)
    judge = Scripted(True)
    pair = GreyPair(ask(PAUSE), S, GreyCandidate(exact_key(ask(CANCEL)), CANCEL, 0.6),
                    {"content": "fresh"})
    outcome = await judge_pair(cache, pair, judge)
    assert outcome.status == "below_floor" and outcome.score < S.judge_floor
    assert judge.asked == 0


async def test_a_pair_an_exact_check_rejects_is_not_judged(cache):
    await cache.store(ask("Is flight BA117 on time?"), {"content": "Yes"}, S)
    judge = Scripted(True)
    pair = GreyPair(ask("Is flight BA118 on time?"), S,
                    GreyCandidate(exact_key(ask("Is flight BA117 on time?")),
                                  "Is flight BA117 on time?", 0.9), {"content": "fresh"})
    assert (await judge_pair(cache, pair, judge)).status == "clash"
    assert judge.asked == 0
