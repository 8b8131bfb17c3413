"""The goals against the baseline: p95 ratio at its best rate, and the rate ratio."""

import math

import pytest

from bench.harness.goals import comparison_rates, evaluate_goals, goals_table
from bench.harness.stats import RunSummary
from bench.harness.sweep import SweepResult


def _summary(target: str, rate: float, p95: float) -> RunSummary:
    return RunSummary(target=target, workload="chat", rate=rate, duration_s=1, requests=10, unfinished=0,
                      errors=0, ttft_ms={"p50": p95, "p95": p95, "p99": p95}, tpot_ms={},
                      itl_ms={}, e2e_ms={}, throughput_rps=rate, output_tokens_per_s=0,
                      goodput=1.0, goodput_rps=rate, slo_ms=700, cache={}, prompt_tokens=0,
                      cached_tokens=0)


def _sweep(target: str, points: list[tuple[float, float]]) -> SweepResult:
    return SweepResult(target, "chat", 700, [_summary(target, r, p) for r, p in points])


def test_goals_met_and_missed():
    base = _sweep("llama.cpp", [(0.5, 400.0), (1.0, 600.0), (2.0, 3000.0)])
    fast = _sweep("headstart", [(1.0, 150.0), (2.0, 200.0), (4.0, 500.0), (8.0, 900.0)])
    slow = _sweep("litellm", [(1.0, 650.0), (2.0, 800.0)])
    assert comparison_rates([base, fast], "llama.cpp") == {"chat": 1.0}
    rows = {r.target: r for r in evaluate_goals([base, fast, slow], "llama.cpp")}
    h = rows["headstart"]
    assert h.baseline_rate == 1.0 and h.baseline_p95_ms == 600.0
    assert h.p95_ratio == pytest.approx(0.25) and h.p95_goal_met
    assert h.max_rate == 4.0 and h.rate_ratio == pytest.approx(4.0) and h.rate_goal_met
    assert not h.rate_is_lower_bound
    s = rows["litellm"]
    assert s.p95_goal_met is False and s.rate_goal_met is False
    table = goals_table(list(rows.values()))
    assert "| chat | headstart | 1 | 1 | 600 | 150 | 0.25 met | 4 | 4.00 met |" in table


def test_goals_mark_a_target_that_never_failed_as_a_lower_bound():
    base = _sweep("llama.cpp", [(1.0, 500.0), (2.0, 900.0)])
    fast = _sweep("headstart", [(1.0, 100.0), (2.0, 100.0)])
    row = evaluate_goals([base, fast], "llama.cpp")[0]
    assert row.rate_is_lower_bound and row.rate_ratio == pytest.approx(2.0)
    assert "≥2.00" in goals_table([row])


def test_a_baseline_that_never_met_the_slo_is_compared_at_its_lowest_rate():
    """llama.cpp failed at 0.25 and 0.5/s: compare there; its true rate is below 0.25/s, so
    headstart's 1/s is more than 4x it (a strict lower bound)."""
    base = _sweep("llama.cpp", [(0.5, 9000.0), (0.25, 5000.0)])
    fast = _sweep("headstart", [(0.25, 100.0), (0.5, 150.0), (1.0, 300.0), (2.0, 900.0)])
    assert comparison_rates([base, fast], "llama.cpp") == {"chat": 0.25}
    row = evaluate_goals([base, fast], "llama.cpp")[0]
    assert row.baseline_rate is None and row.compared_at == 0.25 and row.baseline_never_met_slo
    assert row.p95_ratio == pytest.approx(0.02) and row.p95_goal_met
    assert row.rate_ratio == pytest.approx(4.0) and row.rate_goal_met
    assert "| chat | headstart | none | 0.25 | 5000 | 100 | 0.02 met | 1 | >4.00 met |" in (
        goals_table([row]))


def test_nothing_to_compare_when_neither_ever_answered():
    base = _sweep("llama.cpp", [(0.25, math.inf)])
    dead = _sweep("headstart", [(0.25, math.inf)])
    row = evaluate_goals([base, dead], "llama.cpp")[0]
    assert row.p95_ratio is None and row.p95_goal_met is None and row.rate_goal_met is None
    assert row.to_dict()["p95_goal_met"] is None
