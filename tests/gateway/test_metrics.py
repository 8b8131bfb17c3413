"""The gateway's metrics: plain labelled values exported in Prometheus text format."""

from __future__ import annotations

import pytest

from gateway.metrics import GatewayMetrics


def lines(metrics: GatewayMetrics, prefix: str) -> dict[str, float]:
    out = {}
    for line in metrics.render().decode().splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_counters_add_per_label_set():
    m = GatewayMetrics()
    m.requests.labels("r", "ok").inc()
    m.requests.labels("r", "ok").inc()
    m.requests.labels("r", "error").inc()
    m.prompt_tokens.labels("r").inc(40)
    got = lines(m, "headstart_gateway_requests_total")
    assert got == {'headstart_gateway_requests_total{outcome="ok",route="r"}': 2.0,
                   'headstart_gateway_requests_total{outcome="error",route="r"}': 1.0}
    assert lines(m, "headstart_gateway_prompt_tokens_total") == {
        'headstart_gateway_prompt_tokens_total{route="r"}': 40.0}


def test_histograms_have_cumulative_buckets_count_and_sum():
    m = GatewayMetrics()
    child = m.latency.labels("r", "ok")
    for seconds in (0.001, 0.003, 500.0):  # on a bound, inside, beyond the last bound
        child.observe(seconds)
    got = lines(m, "headstart_gateway_request_seconds")
    key = 'headstart_gateway_request_seconds_{}{{{}outcome="ok",route="r"}}'
    assert got[key.format("bucket", 'le="0.001",')] == 1.0
    assert got[key.format("bucket", 'le="0.0025",')] == 1.0
    assert got[key.format("bucket", 'le="0.005",')] == 2.0
    assert got[key.format("bucket", 'le="120.0",')] == 2.0
    assert got[key.format("bucket", 'le="+Inf",')] == 3.0
    assert got[key.format("count", "")] == 3.0
    assert got[key.format("sum", "")] == pytest.approx(500.004)


def test_children_are_reused_and_label_counts_checked():
    m = GatewayMetrics()
    assert m.ttft.labels("r", "miss") is m.ttft.labels("r", "miss")
    with pytest.raises(ValueError):
        m.ttft.labels("r")


def test_cache_counters_are_read_at_scrape_time():
    m = GatewayMetrics()
    m.watch_cache(lambda: {"r": {"hits": 3}})
    assert lines(m, "headstart_cache_hits_total") == {'headstart_cache_hits_total{route="r"}': 3.0}
