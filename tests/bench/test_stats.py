"""Percentiles, goodput and the run summary on known inputs."""

import math

import pytest

from bench.harness.stats import RequestRecord, goodput_share, percentile, summarize


def test_percentile_matches_linear_interpolation():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 95) == pytest.approx(9.55)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert percentile([3.0], 95) == 3.0
    assert percentile([], 50) is None


def test_percentile_ignores_input_order():
    assert percentile([10.0, 1.0, 5.0], 50) == 5.0


def test_percentile_reaching_an_infinite_value_is_infinite():
    values = [0.1] * 18 + [math.inf] * 2
    assert percentile(values, 50) == pytest.approx(0.1)
    assert math.isinf(percentile(values, 95))


def test_goodput_counts_ttft_within_slo_inclusive():
    assert goodput_share([0.1, 0.7, 0.71, math.inf], slo_ms=700) == pytest.approx(0.5)
    assert goodput_share([], slo_ms=700) == 0.0


def _record(ttft, e2e, tokens, *, error=None, warmup=False, cache="miss", cached=0,
            unfinished=False):
    return RequestRecord(session_id="s", turn=0, sent_s=0.0, ttft_s=ttft, e2e_s=e2e,
                         itl_s=[0.01] * max(0, tokens - 1), completion_tokens=tokens,
                         prompt_tokens=100, cached_tokens=cached, cache=cache, error=error,
                         warmup=warmup, unfinished=unfinished)


def test_summary_excludes_warmup_and_counts_failures_as_misses():
    records = [
        _record(0.2, 0.5, 4, cache="miss"),
        _record(0.4, 0.7, 4, cache="exact", cached=100),
        _record(5.0, 9.0, 4, warmup=True),  # excluded
        _record(None, None, 0, error="APIConnectionError: boom"),
    ]
    s = summarize(records, target="t", workload="chat", rate=1.0, duration_s=2.0, slo_ms=700)
    assert s.requests == 3 and s.errors == 1 and s.unfinished == 0
    assert s.goodput == pytest.approx(2 / 3, abs=1e-4)
    assert s.goodput_rps == pytest.approx(1.0)
    assert s.throughput_rps == pytest.approx(1.0)
    assert s.ttft_ms["p50"] == pytest.approx(400.0)
    assert math.isinf(s.ttft_ms["p99"])
    assert not s.within_slo()
    assert s.cache == {"miss": 1, "exact": 1, "none": 1} or s.cache["exact"] == 1
    assert s.cached_tokens == 100 and s.prompt_tokens == 200
    assert s.tpot_ms["p50"] == pytest.approx(100.0)  # (0.5 - 0.2) / 3 and (0.7 - 0.4) / 3
    assert s.output_tokens_per_s == pytest.approx(4.0)
    assert s.to_dict()["ttft_ms"]["p99"] == "inf"


def test_summary_within_slo_when_p95_meets_it():
    records = [_record(0.1 + i * 0.01, 0.5, 2) for i in range(20)]
    s = summarize(records, target="t", workload="faq", rate=2.0, duration_s=10, slo_ms=700)
    assert s.within_slo() and s.goodput == 1.0
    assert s.ttft_ms["p95"] == pytest.approx(280.5)


def test_unfinished_requests_keep_their_ttft_but_not_their_end_to_end():
    records = [_record(0.3, None, 0, unfinished=True), _record(None, None, 0, unfinished=True),
               _record(0.1, 0.4, 4)]
    s = summarize(records, target="t", workload="rag", rate=1.0, duration_s=1.0, slo_ms=700)
    assert s.unfinished == 2 and s.errors == 0
    assert s.ttfts_ms[:2] == [300.0, math.inf]
    assert s.goodput == pytest.approx(2 / 3, abs=1e-4)
    assert s.throughput_rps == 1.0 and s.e2e_ms["p50"] == pytest.approx(400.0)
