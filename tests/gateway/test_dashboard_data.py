"""`/dashboard/data`'s compact form of a registry, and engine series folded into the
gateway's registry (with an `upstream` label when asked)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.dashboard.data import registry_snapshot
from gateway.metrics import GatewayMetrics


def test_counters_and_histograms_become_flat_rows():
    m = GatewayMetrics()
    m.requests.labels("faq", "ok").inc(3)
    m.requests.labels("faq", "error").inc()
    ttft = m.ttft.labels("faq", "miss")
    ttft.observe(0.004)
    ttft.observe(0.3)
    families = registry_snapshot(m.registry)["families"]
    assert families["headstart_gateway_requests"] == {
        "type": "counter", "labels": ["route", "outcome"],
        "values": [["faq", "ok", 3.0], ["faq", "error", 1.0]]}
    hist = families["headstart_gateway_ttft_seconds"]
    assert hist["labels"] == ["route", "cache"] and hist["le"][:3] == [0.001, 0.0025, 0.005]
    (row,) = hist["values"]
    route, cache, total, counts = row
    assert (route, cache) == ("faq", "miss") and total == 0.304
    assert len(counts) == len(hist["le"]) + 1  # +Inf last: the count
    assert counts[hist["le"].index(0.005)] == 1 and counts[hist["le"].index(0.25)] == 1
    assert counts[hist["le"].index(0.3)] == 2 and counts[-1] == 2


def test_untouched_families_and_other_prefixes_are_left_out():
    registry = CollectorRegistry()
    Gauge("other_thing", "not ours", registry=registry).set(1)
    Counter("headstart_x_events", "labelled, never touched", ["kind"], registry=registry)
    Gauge("headstart_x_level", "set", registry=registry).set(2.5)
    assert registry_snapshot(registry)["families"] == {
        "headstart_x_level": {"type": "gauge", "labels": [], "values": [[2.5]]}}


def test_prometheus_client_histograms_keep_their_bounds():
    registry = CollectorRegistry()
    h = Histogram("headstart_x_seconds", "d", buckets=(0.1, 1.0), registry=registry)
    h.observe(0.5)
    assert registry_snapshot(registry)["families"]["headstart_x_seconds"] == {
        "type": "histogram", "labels": [], "le": [0.1, 1.0], "values": [[0.5, [0.0, 1.0, 1.0]]]}


def engine_registry(used: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("headstart_engine_kv_blocks_used", "d", registry=registry).set(used)
    return registry


def test_engine_series_join_the_gateway_registry_unchanged():
    m = GatewayMetrics()
    m.watch_engine(engine_registry(7))
    assert "\nheadstart_engine_kv_blocks_used 7.0\n" in m.render().decode()


def test_several_engines_are_told_apart_by_upstream():
    m = GatewayMetrics()
    m.watch_engine(engine_registry(7), upstream="a")
    m.watch_engine(engine_registry(9), upstream="b")
    text = m.render().decode()
    assert 'headstart_engine_kv_blocks_used{upstream="a"} 7.0' in text
    assert 'headstart_engine_kv_blocks_used{upstream="b"} 9.0' in text
    assert text.count("# TYPE headstart_engine_kv_blocks_used gauge") == 1  # one family
    rows = registry_snapshot(m.registry)["families"]["headstart_engine_kv_blocks_used"]
    assert rows == {"type": "gauge", "labels": ["upstream"], "values": [["a", 7.0], ["b", 9.0]]}
