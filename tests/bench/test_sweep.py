"""The sweep's rate steps and its highest-rate-within-SLO rule."""

from bench.harness.stats import RunSummary
from bench.harness.sweep import highest_rate_within_slo, sweep_rates


def test_highest_rate_is_below_the_lowest_failure():
    points = [(1.0, 100.0), (2.0, 300.0), (4.0, 900.0), (8.0, 650.0)]
    assert highest_rate_within_slo(points, 700) == 2.0


def test_highest_rate_all_pass_and_none_pass():
    assert highest_rate_within_slo([(1, 10.0), (2, 700.0)], 700) == 2
    assert highest_rate_within_slo([(1, 701.0), (2, float("inf"))], 700) is None
    assert highest_rate_within_slo([], 700) is None


def _summary(rate: float, p95: float) -> RunSummary:
    return RunSummary(target="t", workload="chat", rate=rate, duration_s=1, requests=10, unfinished=0,
                      errors=0, ttft_ms={"p50": p95, "p95": p95, "p99": p95}, tpot_ms={},
                      itl_ms={}, e2e_ms={}, throughput_rps=rate, output_tokens_per_s=0,
                      goodput=1.0, goodput_rps=rate, slo_ms=700, cache={}, prompt_tokens=0,
                      cached_tokens=0)


def _server(capacity: float):
    """A fake latency curve: p95 TTFT passes the SLO up to `capacity` req/s."""
    tried = []

    async def run_at(rate: float) -> RunSummary:
        tried.append(rate)
        return _summary(rate, 100.0 if rate <= capacity else 5000.0)

    return run_at, tried


async def test_sweep_doubles_then_bisects():
    run_at, tried = _server(capacity=5.0)
    result = await sweep_rates(run_at, start_rate=1, slo_ms=700, refine=1)
    assert tried == [1, 2, 4, 8, 5.66]
    assert result.max_rate == 4


async def test_sweep_goes_down_when_the_start_rate_fails():
    run_at, tried = _server(capacity=0.3)
    result = await sweep_rates(run_at, start_rate=1, slo_ms=700, refine=0)
    assert tried == [1, 0.5, 0.25]
    assert result.max_rate == 0.25


async def test_sweep_stops_at_the_ceiling():
    run_at, tried = _server(capacity=100.0)
    result = await sweep_rates(run_at, start_rate=2, slo_ms=700, max_rate=8)
    assert tried == [2, 4, 8]
    assert result.max_rate == 8
    assert result.to_dict()["max_rate_within_slo"] == 8
