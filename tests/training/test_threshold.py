"""Choosing the verifier's thresholds from out-of-fold scores: exact counts on tiny sets,
and the shipped thresholds reproduced from the scores kept in the repo."""

import json

import numpy as np
import pytest

from cache.pair_model import WEIGHTS
from training import threshold
from training.train import fold_of, training_pairs


def test_the_threshold_lets_through_at_most_the_allowed_share_of_near_misses():
    score = np.array([0.99, 0.97, 0.95, 0.9, 0.8, 0.2, 0.1, 0.3, 0.96, 0.5])
    same = np.array([False] * 8 + [True] * 2)
    # one near miss in eight may pass at 12.5%, none at 10%
    assert threshold.threshold_at(score, same, 0.125) == pytest.approx(0.97 + 1e-4)
    assert threshold.threshold_at(score, same, 0.10) == pytest.approx(0.99 + 1e-4)


def test_near_misses_served_before_the_model_use_up_the_allowance():
    score = np.array([0.99, 0.97, 0.95, 0.9, 0.8, 0.2, 0.1, 0.3])
    same = np.zeros(8, bool)
    served = np.array([False] * 7 + [True])  # the same text once normalised
    model = ~served
    assert threshold.threshold_at(score, same, 0.25, model, served) == pytest.approx(0.97 + 1e-4)
    served[6] = True
    model = ~served
    assert threshold.threshold_at(score, same, 0.125, model, served) > 1.0  # nothing else


def test_scores_are_found_by_the_pair_text_and_a_new_pair_asks_for_a_retrain(tmp_path):
    pairs = [{"a": "How do I lock my card?", "b": "Where can I lock my card?"},
             {"a": "Where can I lock my card?", "b": "How do I lock my card?"}]
    path = tmp_path / "oof.safetensors"
    threshold.save_scores(pairs, np.array([0.25, 0.75]), path)
    assert threshold.load_scores(pairs[::-1], path).tolist() == [0.75, 0.25]
    with pytest.raises(SystemExit, match="1 training pairs have no out-of-fold score"):
        threshold.load_scores(pairs + [{"a": "x", "b": "y"}], path)


def test_the_guards_own_verdicts_come_before_the_model():
    pairs = [{"a": "How do I reset my password?", "b": "um how do i reset my password"},
             {"a": "How do I lock my card?", "b": "How do I unlock my card?"},
             {"a": "How do I sfoten butter?", "b": "How do I soften butter?"},
             {"a": "How do I lock my card?", "b": "Where can I freeze my card?"}]
    assert threshold.before_model(pairs) == [True, False, True, None]


def test_the_shipped_thresholds_are_the_ones_the_kept_scores_give():
    pairs = training_pairs()
    fold = np.array([fold_of(p["group"], 3) for p in pairs])
    report = threshold.choose(pairs, threshold.load_scores(pairs), fold, 0.01)
    shipped = json.loads(WEIGHTS.with_suffix(".json").read_text())
    assert (report["threshold"], report["conversation_threshold"]) == \
        (shipped["threshold"], shipped["conversation_threshold"])
    assert report["operating_points"] == shipped["operating_points"]
    served, near_misses = map(int, report["cv_questions"]["false_hits"].split("/"))
    assert served <= 0.01 * near_misses


def test_two_runs_compare_at_one_false_hit_rate_whatever_their_scales():
    same = np.array([True, True, True, True, False, False, False, False])
    sharp = np.array([0.99, 0.98, 0.6, 0.2, 0.97, 0.1, 0.1, 0.1])
    flat = sharp * 0.5  # the same order on another scale: the same rates
    for score in (sharp, flat):
        assert threshold.true_hits_at(score, same, 0.25) == 1.0  # one near miss may pass
        assert threshold.true_hits_at(score, same, 0.0) == 0.5  # over 0.97: two of four
    assert threshold.true_hits_at(np.array([0.1, 0.9]), np.array([True, False]), 0.0) == 0.0


def test_a_fold_report_compares_question_and_conversation_pairs_the_model_reads():
    from training.train import fold_report

    pairs = [{"a": "How do I lock my card?", "b": "Where can I freeze my card?",
              "same_answer": True},
             {"a": "How do I lock my card?", "b": "How do I order a new card?",
              "same_answer": False},
             {"a": "How do I lock my card?", "b": "How do I unlock my card?",
              "same_answer": False}]  # rejected before the model: not counted
    report = fold_report(pairs, np.array([0.9, 0.5, 0.99]), np.array([0.4, 0.5, 0.99]))
    assert report["questions true hits at 1% false"] == {"tried": 1.0, "shipped": 0.0}
    assert report["conversations true hits at 2% false"] == {"tried": 0.0, "shipped": 0.0}
