"""bench/engine/disagg_bench.py's arithmetic on a scripted result (the live run starts three
engine processes: `python -m bench.engine.disagg_bench`)."""

from __future__ import annotations

import pytest

from bench.engine.disagg_bench import first_difference, report, summary


def row(same_as_cold: bool) -> dict:
    return {"blocks": 63, "bytes": 63 * 368_640, "seconds": 0.0315, "prefill_s": 0.5,
            "decode_ttft_s": 0.09, "colocated_ttft_s": 0.52, "same_as_cold": same_as_cold,
            "same_as_warm": True, "cold_same_as_warm": same_as_cold,
            "parts_from_cold_at": None if same_as_cold else 1, "computed_on_decode": 16}


def gaps(p95: float) -> dict:
    values = [10.0] * 19 + [p95]
    return {"p50_ms": 10.0, "p95_ms": p95, "max_ms": p95, "long_prompts": 1,
            "computed_here": 64, "gaps_ms": values}


RESULT = {
    "handover": [row(True), row(False)],
    "inter_token": [
        {"decode alone": gaps(10.0), "decode, long prefills on the prefill engine": gaps(30.0),
         "decode, long prompts handed to it": gaps(20.0), "colocated alone": gaps(10.0),
         "colocated, long prompts on it": gaps(500.0)},
        {"decode alone": gaps(20.0), "decode, long prefills on the prefill engine": gaps(20.0),
         "decode, long prompts handed to it": gaps(40.0)},
    ],
    "long_prompt_tokens": 4000, "stream_tokens": 20, "pinned": True,
}


def test_summary_costs_a_block_and_a_thousand_tokens() -> None:
    s = summary(RESULT)
    assert s["ms_per_block"] == 0.5 and s["bytes_per_block"] == 368_640
    assert s["ms_per_1k_tokens"] == 0.5 * 1000 / 16
    assert (s["same_as_warm"], s["same_as_cold"], s["cold_same_as_warm"]) == ("2/2", "1/2", "1/2")
    assert s["max_computed_on_decode"] == 16


def test_ratios_are_per_round_and_the_colocated_ones_only_where_measured() -> None:
    s = summary(RESULT)
    assert s["decode_p95_ratio"] == [3.0, 1.0]
    assert s["handed_p95_ratio"] == [2.0, 2.0]
    assert s["colocated_p95_ratio"] == [50.0]
    # 20 gaps: the 95th percentile lies 5% of the way from the 19th (10 ms) to the 20th
    assert s["pooled_p95_ms"]["colocated, long prompts on it"] == pytest.approx(34.5)


def test_the_report_names_every_round_and_condition() -> None:
    text = report(RESULT)
    assert "| 0.50 ms | 368,640 | 31.2 ms | 500 ms | 90 ms | 520 ms | 2/2 / 1/2 | 1/2 | 16 |" in text
    assert "| round 1: decode, long prompts handed to it | 10.0 ms | 40.0 ms | 40 ms | 2.00 |" in text
    assert "round 1: colocated" not in text


def test_first_difference_is_where_two_answers_part() -> None:
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") == 2
    assert first_difference("ab", "abc") == 2
