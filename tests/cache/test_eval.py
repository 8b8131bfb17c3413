"""Pairs evaluation: our own cases, fow-cache's conversations, and the CLI's JSON line."""

import importlib.util
import json
from pathlib import Path

import pytest

from cache.eval import evaluate, is_held_out, load_pairs
from cache.settings import CacheSettings
from gateway.eval_cache import main as eval_main

DATA = Path(__file__).parent / "data"
FOW = Path(importlib.util.find_spec("fow_cache").origin).parent / "data"
S = CacheSettings(route="r", semantic_enabled=True, threshold=0.85)


def test_split_is_fixed_and_about_thirty_percent():
    ids = [f"x-{i}" for i in range(1000)]
    held = [i for i in ids if is_held_out(i)]
    assert 250 < len(held) < 350 and held == [i for i in ids if is_held_out(i)]
    pairs = load_pairs(FOW / "pairs.jsonl")
    assert len(load_pairs(FOW / "pairs.jsonl", "held_out")) + len(
        load_pairs(FOW / "pairs.jsonl", "train")) == len(pairs) == 600


async def test_own_cases_no_false_hits_and_most_true_hits():
    report = await evaluate(load_pairs(DATA / "extra_pairs.jsonl"), S)
    assert report.false_hits == 0, report.false_hit_ids
    assert report.true_hit_rate >= 0.8


async def test_second_set_of_own_cases_typos_synonyms_and_siblings():
    report = await evaluate(load_pairs(DATA / "extra_pairs_2.jsonl"), S)
    assert report.false_hits == 0, report.false_hit_ids
    assert report.true_hit_rate >= 0.8


async def test_reworded_own_cases_serve_no_new_false_hits():
    """Sets 3 and 4: rewordings that are the same question, and rewordings that ask
    something else. Two known false hits: a detail added at high similarity."""
    pairs = load_pairs(DATA / "extra_pairs_3.jsonl") + load_pairs(DATA / "extra_pairs_4.jsonl")
    report = await evaluate(pairs, CacheSettings(route="r", semantic_enabled=True))
    assert set(report.false_hit_ids) <= {"s3-f07", "s4-f13"}
    assert report.true_hits >= 16 and report.should_hit == 27


async def test_wordnet_own_cases_synonyms_antonyms_and_polysemy_traps():
    """Set 5: synonyms in no hand-written group, WordNet antonyms, and traps where a word's
    first WordNet sense is not the one meant ("account" / "history")."""
    report = await evaluate(load_pairs(DATA / "extra_pairs_5.jsonl"),
                            CacheSettings(route="r", semantic_enabled=True))
    assert report.false_hits == 0, report.false_hit_ids
    assert report.true_hits >= 6 and report.should_hit == 10


async def test_no_hits_across_different_conversations():
    pairs = load_pairs(FOW / "conv-parts") + load_pairs(DATA / "extra_conversations.jsonl")
    report = await evaluate(pairs, S)
    assert report.false_hits == 0, report.false_hit_ids
    assert report.by_category["same_context_reworded"]["served"] >= 1  # our own same-context case


def test_cli_json_last_line(capsys):
    assert eval_main(["--pairs", str(DATA / "extra_pairs.jsonl"), "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    assert summary["pairs"] == 40 and set(summary) == {
        "pairs", "true_hit_rate", "false_hit_rate", "by_category"}
    assert summary["by_category"]["negation"]["served"] == 0


def test_cli_errors(capsys):
    assert eval_main(["--pairs", "/nonexistent.jsonl"]) == 2
    assert eval_main(["--pairs", str(DATA / "extra_pairs.jsonl"), "--route", "nope"]) == 2


@pytest.mark.slow
async def test_fow_pairs_held_out():
    report = await evaluate(load_pairs(FOW / "pairs.jsonl", "held_out"), S)
    assert report.false_hit_rate <= 0.03


async def test_default_threshold_keeps_conversations_apart_and_own_cases_clean():
    """The route default (0.78, lower than the cases above) still never crosses conversations."""
    default = CacheSettings(route="r", semantic_enabled=True)
    assert default.threshold < S.threshold
    conv = await evaluate(load_pairs(FOW / "conv-parts") + load_pairs(FOW / "conv-long"), default)
    assert conv.false_hits == 0, conv.false_hit_ids
    own = await evaluate(load_pairs(DATA / "extra_pairs.jsonl"), default)
    assert own.false_hits == 0, own.false_hit_ids
