"""A route's error budget (cache/budget.py): no loosening without judged evidence, the band
the bound allows, tightening when "no"s come in, exploration, the estimate."""

from __future__ import annotations

from cache.budget import EXPLORE_EVERY, MIN_IN_BAND, MIN_JUDGED, RouteBudget, upper_bound
from cache.evidence import BANDS, Evidence, band_of

SHIPPED = 0.9868


def judged(budget: RouteBudget, score: float, times: int, same: bool = True) -> RouteBudget:
    """`budget` after `times` judgements of candidates (of entries that could loosen)
    scoring `score`."""
    for _ in range(times):
        budget.record_judgement(band_of(score), same, eligible=True)
    return budget


def with_yes(band: int) -> Evidence:
    evidence = Evidence()
    evidence.record(band, True)
    return evidence


def test_the_wilson_bound_of_nothing_seen_is_one_and_shrinks_with_evidence():
    assert upper_bound(0, 0) == 1.0
    assert round(upper_bound(0, 40), 4) == 0.0634
    assert round(upper_bound(2, 200), 4) == 0.0298


def test_without_judgements_every_entry_keeps_the_threshold():
    budget = RouteBudget()
    assert budget.band is None
    assert budget.bar(with_yes(band_of(0.6)), SHIPPED) == SHIPPED


def test_enough_yes_with_many_hits_loosens_the_band():
    budget = RouteBudget(hits=2000)
    judged(budget, 0.85, MIN_JUDGED)
    assert budget.band == band_of(0.85)
    assert budget.bar(with_yes(band_of(0.6)), SHIPPED) == BANDS[band_of(0.85)]
    assert budget.bar(None, SHIPPED) == SHIPPED  # an entry nobody judged: the threshold
    assert budget.bar(Evidence(), SHIPPED) == SHIPPED  # judged, never "yes": the same


def test_an_entrys_closest_no_keeps_its_bar_above_it():
    budget = RouteBudget(hits=2000)
    judged(budget, 0.55, MIN_JUDGED)
    evidence = with_yes(band_of(0.9))
    evidence.record(band_of(0.75), False, form=1)
    assert budget.bar(evidence, SHIPPED) == BANDS[band_of(0.75) + 1]


def test_too_few_hits_to_spend_on_keeps_the_threshold():
    budget = RouteBudget(hits=0)
    judged(budget, 0.85, MIN_JUDGED)
    assert budget.band is None  # every candidate would be a loosened hit: bound 6% > 1%


def test_nos_tighten_the_band_again():
    budget = RouteBudget(hits=2000)
    judged(budget, 0.45, MIN_JUDGED)
    assert budget.band == band_of(0.45)
    judged(budget, 0.45, 30, same=False)
    assert budget.band is None


def test_hits_served_under_the_threshold_spend_the_budget():
    budget = RouteBudget(hits=300)
    judged(budget, 0.85, MIN_JUDGED)
    assert budget.band == band_of(0.85)
    for _ in range(100):
        budget.record_hit(band_of(0.85))
    assert budget.band is None


def test_one_would_be_hit_in_explore_every_is_judged_instead():
    budget = RouteBudget()
    assert [budget.explore() for _ in range(2 * EXPLORE_EVERY)].count(True) == 2


def test_the_estimate_weighs_hits_under_the_threshold_by_the_judged_no_rate():
    budget = RouteBudget(hits=90)
    assert budget.estimate() == 0.0
    for same in [True] * 8:
        budget.record_judgement(band_of(0.85), same, eligible=True)
    for _ in range(10):
        budget.record_hit(band_of(0.85))
    assert round(budget.estimate(), 4) == round((0 + 1) / (8 + 2) * 10 / 100, 4)


def test_a_band_without_judgements_of_its_own_never_loosens():
    budget = RouteBudget(hits=2000)
    judged(budget, 0.85, MIN_JUDGED)
    judged(budget, 0.35, MIN_IN_BAND - 1)
    assert budget.band == band_of(0.85)
