"""bench/engine/engine_bench.py: the arithmetic of the report, and a --quick smoke run (slow)."""

from __future__ import annotations

import json
import math

import pytest

from bench.engine.engine_bench import Sizes, best, decode_rate, main, random_prompt, report
from bench.engine.timing import english_prompt


def test_decode_rate_counts_only_tokens_after_every_first_token():
    # two sequences: first tokens at 1.0 and 2.0; tokens after 2.0: 3.0, 4.0 (seq a), 3.0 (seq b)
    rate = decode_rate([[1.0, 3.0, 4.0], [2.0, 3.0]])
    assert rate == pytest.approx(3 / 2.0)
    assert math.isnan(decode_rate([[1.0]]))


def test_best_takes_the_fastest_trial_and_skips_missing_ones():
    assert best("cold_ttft_512_s", [0.5, 0.3, 0.9]) == 0.3
    assert best("decode_b1_tok_s", [20.0, float("nan"), 30.0]) == 30.0
    assert math.isnan(best("decode_b8_tok_s", [float("nan")]))


def test_random_prompts_are_fresh_per_seed_and_of_the_asked_length():
    a, b = random_prompt(100, 1), random_prompt(100, 2)
    assert len(a) == 100 and a != b and a == random_prompt(100, 1)


def test_report_computes_ratios_and_verdicts():
    sizes = Sizes(cold=(512,), batch=8)
    results = {
        "headstart": {"cold_ttft_512_s": 0.2, "cached_prefix_ttft_s": 0.05,
                      "decode_b1_tok_s": 100.0, "decode_b8_tok_s": 300.0},
        "transformers": {"cold_ttft_512_s": 0.5, "cached_prefix_ttft_s": 0.1,
                         "decode_b1_tok_s": 25.0, "decode_b8_tok_s": 150.0},
        "llama-server": {"cold_ttft_512_s": 1.6, "cached_prefix_ttft_s": 0.2,
                         "decode_b1_tok_s": 120.0, "decode_b8_tok_s": 400.0},
    }
    table, rows = report(results, sizes)
    by = {r["metric"]: r for r in rows}
    assert by["cold_ttft_512_s"]["ratio_transformers"] == pytest.approx(0.4)
    assert by["cold_ttft_512_s"]["ratio_llama-server"] == pytest.approx(0.125)
    assert by["cold_ttft_512_s"]["met"] is True  # 0.4x <= 0.5x
    assert by["cached_prefix_ttft_s"]["met"] is False  # 0.25x Headstart's cold 512 > 0.1x
    assert by["decode_b8_tok_s"]["met"] is False  # 3x batch 1, 4x needed
    assert "| llama-server |" in table.splitlines()[0]
    assert table.count("\n") == 1 + len(rows)


def test_report_shows_an_extra_engine_only_when_it_ran():
    sizes = Sizes(cold=(512,))
    plain, _ = report({"headstart": {"cold_ttft_512_s": 0.2}}, sizes)
    eager, rows = report({"headstart": {"cold_ttft_512_s": 0.2},
                          "transformers-eager": {"cold_ttft_512_s": 1.0}}, sizes)
    assert "transformers-eager" not in plain and "H/transformers-eager" in eager
    assert rows[0]["ratio_transformers-eager"] == pytest.approx(0.2)


def test_report_leaves_missing_engines_blank():
    table, rows = report({"headstart": {"decode_b1_tok_s": 50.0}}, Sizes(cold=(512,)))
    assert all(r["transformers"] is None and r["met"] in (None, False) for r in rows)
    assert "–" in table


@pytest.mark.slow
def test_quick_run_writes_json(tmp_path):
    assert main(["--quick", "--engines", "headstart", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "engine_bench.json").read_text())
    figures = data["results"]["headstart"]
    assert figures["cold_ttft_64_s"] > 0 and figures["decode_b1_tok_s"] > 0
    assert {r["metric"] for r in data["rows"]} >= {"cached_prefix_ttft_s", "decode_b4_tok_s"}


def test_the_server_counts_beside_headstart_against_the_cold_target():
    sizes = Sizes(cold=(512,))
    results = {"headstart": {"cold_ttft_512_s": 0.2}, "transformers": {"cold_ttft_512_s": 0.5},
               "headstart-server": {"cold_ttft_512_s": 0.3}}
    table, rows = report(results, sizes)
    assert rows[0]["headstart-server"] == 0.3 and "H/headstart-server" not in table
    assert "(server: 0.600×)" in rows[0]["target"]
    assert rows[0]["met"] is False  # in-process 0.4x, but the server 0.6x
    results["headstart-server"]["cold_ttft_512_s"] = 0.24
    assert report(results, sizes)[1][0]["met"] is True


def test_english_prompts_are_prose_fresh_per_seed_and_of_the_asked_length():
    from engine.weights import load_tokenizer

    a, b = english_prompt(700, 1), english_prompt(700, 2)
    assert len(a) == 700 and a[:16] != b[:16] and a == english_prompt(700, 1)
    assert len(english_prompt(5000, 3)) == 5000  # read on past the text's end
    words = load_tokenizer().decode(a).split()
    assert len(words) > 300 and sum(w.isalpha() for w in words) > 0.7 * len(words)


def test_headstart_engine_over_http_streams_the_first_token_and_decodes():
    from bench.engine.server_target import HeadstartServerBench
    from engine.weights import default_model_path

    server = HeadstartServerBench(default_model_path(), threads=1)
    try:
        assert 0 < server.ttft(random_prompt(64, 5)) < 60
        assert server.decode([random_prompt(16, 6), random_prompt(16, 7)], 8) > 0
    finally:
        server.close()
    assert server.proc.poll() is not None
