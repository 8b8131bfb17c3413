"""An entry's judged outcomes (cache/evidence.py): counts by score band, the veto of its
closest "no", refused questions, and the meta they travel in."""

from __future__ import annotations

from cache.evidence import BANDS, MAX_REFUSED, Evidence, band_of


def test_scores_fall_in_bands_by_their_lower_edge():
    assert [band_of(s) for s in (0.01, 0.05, 0.29, 0.3, 0.97, 0.985)] == [-1, 0, 2, 3, 10, 11]
    assert len(BANDS) == 12


def test_an_entry_loosens_only_after_a_yes_and_above_its_closest_no():
    evidence = Evidence()
    assert not evidence.loosens(band_of(0.9))  # no evidence: the threshold holds
    evidence.record(band_of(0.55), True)
    assert evidence.loosens(band_of(0.35))
    evidence.record(band_of(0.72), False, form=7)
    assert (evidence.veto(), evidence.said_yes, evidence.said_no) == (band_of(0.72), 1, 1)
    assert not evidence.loosens(band_of(0.75)) and evidence.loosens(band_of(0.85))


def test_a_no_refuses_its_question_and_a_yes_refuses_nothing():
    evidence = Evidence()
    evidence.record(band_of(0.6), True, form=1)
    evidence.record(band_of(0.6), False, form=2)
    assert (evidence.refuses(1), evidence.refuses(2)) == (False, True)


def test_refusals_keep_the_newest():
    evidence = Evidence()
    for form in range(MAX_REFUSED + 5):
        evidence.record(band_of(0.6), False, form=form)
    assert evidence.refused == list(range(5, MAX_REFUSED + 5))


def test_the_meta_round_trip_keeps_every_count():
    evidence = Evidence()
    evidence.record(band_of(0.31), True)
    evidence.record(band_of(0.31), True)
    evidence.record(band_of(0.91), False, form=-42)
    meta = evidence.to_meta()
    assert meta == {"yes": {"3": 2}, "no": {"9": 1}, "refused": [-42]}
    assert Evidence.from_meta(meta) == evidence
    assert Evidence.from_meta(None) is None
