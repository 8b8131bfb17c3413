"""The load generator's schedule: Poisson arrivals reproducible from a seed."""

import pytest

from bench.harness.loadgen import LoadConfig, normalize_base_url, plan, poisson_arrivals
from bench.harness.workloads import WorkloadSizes


def test_poisson_arrivals_reproducible_from_seed():
    a = poisson_arrivals(5.0, 60.0, seed=1)
    assert a == poisson_arrivals(5.0, 60.0, seed=1)
    assert a != poisson_arrivals(5.0, 60.0, seed=2)


def test_poisson_arrivals_have_the_requested_rate_and_stay_in_the_horizon():
    times = poisson_arrivals(10.0, 1000.0, seed=3)
    assert times == sorted(times)
    assert 0 < times[0] and times[-1] < 1000.0
    assert len(times) == pytest.approx(10_000, rel=0.03)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.03)
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert var ** 0.5 == pytest.approx(0.1, rel=0.05)  # exponential: std == mean


def test_poisson_rejects_a_non_positive_rate():
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 10.0, seed=0)


def test_plan_is_fixed_by_the_seed_with_a_session_per_arrival():
    sizes = WorkloadSizes(turns=4, system_tokens=50)
    cfg = LoadConfig(base_url="http://x", model="m", workload="chat", rate=8.0,
                     duration_s=95.0, warmup_s=5.0, seed=0, sizes=sizes)
    arrivals, sessions = plan(cfg)
    assert len(arrivals) == len(sessions)
    assert len(arrivals) == pytest.approx(8.0 * 100, rel=0.1)
    assert plan(cfg) == (arrivals, sessions)


def test_base_url_gets_its_v1_root():
    assert normalize_base_url("http://h:1") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1/v1"
    assert normalize_base_url("http://h:1/r/support/v1") == "http://h:1/r/support/v1"
