"""Pairs evaluation through the real cache path: the project's own cases, fow-cache's
conversations, the hand-written held-out set, and the CLI's JSON line."""

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from cache.eval import evaluate, format_table, is_held_out, load_pairs, wilson
from cache.settings import CacheSettings
from gateway.eval_cache import main as eval_main

DATA = Path(__file__).parent / "data"
HELDOUT = Path(__file__).parents[2] / "cache" / "data" / "heldout_pairs.jsonl"
FOW = Path(importlib.util.find_spec("fow_cache").origin).parent / "data"
S = CacheSettings(route="r", semantic_enabled=True)  # a route's defaults


def test_split_is_fixed_and_about_thirty_percent():
    ids = [f"x-{i}" for i in range(1000)]
    held = [i for i in ids if is_held_out(i)]
    assert 250 < len(held) < 350 and held == [i for i in ids if is_held_out(i)]
    pairs = load_pairs(FOW / "pairs.jsonl")
    assert len(load_pairs(FOW / "pairs.jsonl", "held_out")) + len(
        load_pairs(FOW / "pairs.jsonl", "train")) == len(pairs) == 600


def test_wilson_intervals():
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(0, 192)
    assert low == 0.0 and 0.015 < high < 0.025
    low, high = wilson(50, 100)
    assert low < 0.5 < high and abs((0.5 - low) - (high - 0.5)) < 1e-3


async def test_no_hits_across_different_conversations_in_full_context():
    pairs = load_pairs(FOW / "conv-parts") + load_pairs(DATA / "extra_conversations.jsonl")
    report = await evaluate(pairs, S)
    assert report.false_hits == 0, report.false_hit_ids


def test_cli_json_last_line_has_intervals_and_operating_points(capsys):
    assert eval_main(["--pairs", str(DATA / "extra_pairs.jsonl"), "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert summary["pairs"] == 40 and set(summary) == {
        "pairs", "true_hit_rate", "false_hit_rate", "true_hit_ci", "false_hit_ci",
        "by_category", "operating_points", "missed_by", "false_hit_ids"}
    assert summary["by_category"]["negation"]["pairs"] == 10
    names = [p["name"] for p in summary["operating_points"]]
    assert "route" in names and "false<=1.0%" in names
    assert any(line.startswith("operating point") for line in out)


async def test_wrong_hits_are_named_in_the_report():
    """The pairs to read first are the wrong answers served: their ids are listed."""
    def trap(i, a, b):
        return {"id": f"w{i}", "a": a, "b": b, "same_answer": False}
    pairs = [trap(1, "How do I reset my password?", "um how do i reset my password"),  # served
             trap(2, "How do I lock my card?", "How do I unlock my card?")]  # opposite
    report = await evaluate(pairs, S)
    assert report.false_hit_ids == ["w1"] and report.summary()["false_hit_ids"] == ["w1"]
    assert "false hits: w1" in format_table(report).splitlines()


async def test_missed_same_answer_pairs_are_counted_by_reason():
    def pair(i, a, b):
        return {"id": f"m{i}", "a": a, "b": b, "same_answer": True}
    pairs = [pair(0, "Track order 48213", "Track order 48231"),  # labelled same: numbers differ
             pair(1, "How do I reset my password?", "Best pizza toppings?"),  # under the floor
             pair(2, "How do I lock my card?", "How do I unlock my card?"),
             pair(3, "How do I reset my password?", "um how do i reset my password"),  # served
             pair(4, "Hi", [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hi"}])]  # another system prompt
    report = await evaluate(pairs, S)
    assert report.true_hits == 1
    assert report.missed_by == {"numbers": 1, "cosine_floor": 1, "opposite": 1, "partition": 1}


def test_cli_errors(capsys):
    assert eval_main(["--pairs", "/nonexistent.jsonl"]) == 2
    assert eval_main(["--pairs", str(DATA / "extra_pairs.jsonl"), "--route", "nope"]) == 2


# Regression bounds at the shipped model's measured figures (2026-11-25, README): the goal
# is <= 1% false hits and >= 70% true hits, which the shipped verifier does not meet.


@pytest.mark.slow
async def test_own_earlier_cases():
    report = await evaluate(load_pairs(DATA), S)
    assert report.false_hits <= 1 and report.true_hits >= 14, report.false_hit_ids


@pytest.mark.slow
async def test_hand_written_held_out_pairs():
    report = await evaluate(load_pairs(HELDOUT), S)
    assert report.pairs == 316
    assert report.false_hits <= 2 and report.true_hits >= 19, report.false_hit_ids


@pytest.mark.slow
async def test_fow_pairs_held_out():
    report = await evaluate(load_pairs(FOW / "pairs.jsonl", "held_out"), S)
    assert report.false_hits == 0 and report.true_hits >= 31, report.false_hit_ids


@pytest.mark.slow
async def test_semantic_context_on_fow_conversations():
    """Measured 2026-11-27: 7 of 120 same-context pairs served, none crossed (README); the
    crossing before the names check was a Starter plan served for a Business one."""
    pairs = load_pairs(FOW / "conv-parts") + load_pairs(FOW / "conv-long")
    report = await evaluate(pairs, replace(S, context="semantic"))
    assert report.false_hits == 0 and report.true_hits >= 5, report.false_hit_ids
