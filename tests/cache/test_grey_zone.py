"""Grey-zone misses: a route with a judge answers a candidate under the verifier's threshold
as a miss, exactly as a route without one, and hands back the pair to judge; a route
without a judge never reads its candidates differently (cache/grey.py, cache/semantic.py)."""

from __future__ import annotations

from dataclasses import replace

from cache.evidence import Evidence, band_of
from cache.keys import CacheRequest, exact_key
from cache.question import form_key
from cache.settings import CacheSettings

PLAIN = CacheSettings(route="r", exact_enabled=True, semantic_enabled=True)
JUDGED = replace(PLAIN, judge="agreement")
CAPITAL = "What is the capital of Australia?"
SEAT = "Which city serves as Australia's seat of government?"  # the verifier: about 0.52
PAUSE = "How do I pause my subscription?"  # against CANCEL: about 0.002, under any floor
CANCEL = "How do I cancel my subscription?"
HELP = "Please help me cancel my subscription."  # against CANCEL: about 0.995, served


def ask(text: str, **kw) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=[{"role": "user", "content": text}],
                        params={"temperature": 0}, **kw)


async def test_a_route_without_a_judge_has_no_grey_zone(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, PLAIN)
    found = await cache.lookup(ask(SEAT), PLAIN)
    assert (found.status, found.grey) == ("miss", None)
    assert cache.stats.get("r").grey_zone == 0
    assert cache.semantic.budgets.snapshot() == {}  # no budget was even made


async def test_a_candidate_under_the_threshold_is_a_miss_with_its_pair_to_judge(cache):
    entry = await cache.store(ask(CAPITAL), {"content": "Canberra"}, JUDGED)
    assert entry
    found = await cache.lookup(ask(SEAT), JUDGED)
    assert found.status == "miss" and found.answer is None
    assert found.grey is not None and found.grey.question == CAPITAL
    assert JUDGED.judge_floor <= found.grey.score < 0.9868 and not found.grey.explored
    assert cache.stats.get("r").grey_zone == 1


async def test_a_candidate_under_the_floor_is_a_plain_miss(cache):
    await cache.store(ask(CANCEL), {"content": "Settings > Cancel"}, JUDGED)
    found = await cache.lookup(ask(PAUSE), JUDGED)
    assert (found.status, found.grey) == ("miss", None)


async def test_an_exact_clash_is_never_grey(cache):
    await cache.store(ask("Is flight BA117 on time?"), {"content": "Yes"}, JUDGED)
    found = await cache.lookup(ask("Is flight BA118 on time?"), JUDGED)
    assert (found.status, found.grey) == ("miss", None)


async def test_a_refused_question_is_never_served_whatever_its_score(cache):
    await cache.store(ask(CANCEL), {"content": "Settings > Cancel"}, JUDGED)
    assert (await cache.lookup(ask(HELP), PLAIN)).status == "semantic"
    evidence = Evidence()  # as a judge's "no" on the pair leaves it (cache/promotion.py)
    evidence.record(band_of(0.995), False, form_key(HELP))
    cache.semantic.index.get(exact_key(ask(CANCEL))).evidence = evidence
    found = await cache.lookup(ask(HELP), JUDGED)
    assert (found.status, found.grey) == ("miss", None)


async def test_a_hit_at_the_threshold_is_counted_against_the_budget(cache):
    await cache.store(ask(CANCEL), {"content": "Settings > Cancel"}, JUDGED)
    found = await cache.lookup(ask("how can i cancel my subscription"), JUDGED)
    assert found.status == "semantic" and found.grey is None
    budget = cache.semantic.budgets.route("r")
    assert (budget.hits, sum(budget.learned)) == (1, 0)
