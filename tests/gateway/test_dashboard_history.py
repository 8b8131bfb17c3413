"""The dashboard's last 15 minutes (gateway/dashboard/history.py): the ring with a fake clock
(one sample a second, 900 at most, none older than 900 s, idle seconds and gaps), the wire
form the page adds back up, and a live gateway whose page, opened after 30 requests, reads
them from its first poll."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge

from gateway.dashboard.history import SECONDS, History, Sampler, Shape
from gateway.fleet.metrics import EndpointGauges, EndpointMetrics
from gateway.metrics import TTFT_BUCKETS, GatewayMetrics
from tests.gateway.conftest import GatewayThread, ScriptedUpstream, wait_until

REQUESTS = ("headstart_gateway_requests", ("faq", "ok"), "")  # one column: faq's ok requests


def requests_ring() -> History:
    """A ring that knows the requests counter's shape (a registry's samples teach it that)."""
    ring = History()
    ring.shapes["headstart_gateway_requests"] = Shape("counter", ("route", "outcome"))
    return ring


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def totals(history: dict[str, Any], family: str, **where: str) -> list[float]:
    """Per sample, a counter's or gauge's value summed over the rows matching `where` (the
    page's expandHistory and M.total)."""
    f = history["families"].get(family)
    out = [0.0] * len(history["t"])
    for row in f["values"] if f else []:
        labels = dict(zip(f["labels"], row, strict=False))
        if all(labels.get(k) == v for k, v in where.items()):
            out = [a + b for a, b in zip(out, accumulate(row[len(f["labels"])]), strict=True)]
    return out


def ttft_counts(history: dict[str, Any]) -> list[float]:
    """Per sample, how many first tokens the TTFT histogram holds (its +Inf bucket)."""
    f = history["families"]["headstart_gateway_ttft_seconds"]
    (row,) = f["values"]  # kept summed over route and cache
    return list(accumulate(row[-1][-1]))


# --- the ring, with a fake clock ---------------------------------------------------------

def test_one_sample_a_second_kept_exactly():
    ring = requests_ring()
    assert ring.record(1000.2, {REQUESTS: 1.0})
    assert not ring.record(1000.9, {REQUESTS: 5.0})  # same second: the first one stands
    assert not ring.record(999.5, {REQUESTS: 5.0})  # an earlier second: refused
    assert ring.record(1001.0, {REQUESTS: 3.0})
    assert ring.record(1003.4, {REQUESTS: 4.0})  # 1002 missed: a gap, not a made-up sample
    assert [(t, list(row)) for t, row in ring.samples] == [
        (1000.2, [1.0]), (1001.0, [3.0]), (1003.4, [4.0])]
    assert ring.since(0)["families"] == {"headstart_gateway_requests": {
        "type": "counter", "labels": ["route", "outcome"],
        "values": [["faq", "ok", [1, 2, 1]]]}}  # the first value, then the changes


def test_the_oldest_sample_goes_after_900_seconds():
    ring = requests_ring()
    for second in range(SECONDS + 1):  # 901 samples, t = 0 .. 900
        ring.record(float(second), {REQUESTS: float(second)})
    assert len(ring.samples) == SECONDS == 900
    assert ring.samples[0][0] == 1.0 and ring.samples[-1][0] == 900.0  # t = 0 dropped
    ring.record(1500.0, {REQUESTS: 1500.0})  # after a stall: 900 s back is 600, so up to 600
    assert [t for t, _ in ring.samples][:2] == [601.0, 602.0] and len(ring.samples) == 301
    ring.record(5000.0, {REQUESTS: 5000.0})
    assert [(t, list(row)) for t, row in ring.samples] == [(5000.0, [5000.0])]


def test_since_returns_the_samples_after_t_first_value_whole():
    ring = requests_ring()
    for second, value in enumerate((2.0, 2.0, 7.0, 7.5)):
        ring.record(100.0 + second, {REQUESTS: value})
    later = ring.since(101.0)
    assert later["t"] == [102.0, 103.0] and later["seconds"] == 900
    assert later["families"]["headstart_gateway_requests"]["values"] == [
        ["faq", "ok", [7, 0.5]]]
    assert ring.since(103.0) == {"seconds": 900, "t": [], "families": {
        "headstart_gateway_requests": {"type": "counter", "labels": ["route", "outcome"],
                                       "values": [["faq", "ok", []]]}}}


def test_idle_seconds_are_samples_without_change_and_new_series_start_at_zero():
    m = GatewayMetrics()
    clock = Clock(5000.3)
    sampler = Sampler(m.registry, clock=clock)
    per_second = [("faq", 2), None, None, ("plain", 1), None]  # idle: no request that second
    for traffic in per_second:
        if traffic:
            route, n = traffic
            m.requests.labels(route, "ok").inc(n)
            m.cache.labels(route, "miss").inc(n)
            for _ in range(n):
                m.ttft.labels(route, "miss").observe(0.02)
        assert sampler.sample()
        assert not sampler.sample()  # the same second again: nothing read, nothing kept
        clock.t += 1.0
    h = sampler.history.since(0)
    assert h["t"] == [5000.3, 5001.3, 5002.3, 5003.3, 5004.3]
    requests = h["families"]["headstart_gateway_requests"]
    assert requests["values"] == [["faq", "ok", [2, 0, 0, 0, 0]],
                                  ["plain", "ok", [0, 0, 0, 1, 0]]]  # 0 before it existed
    assert totals(h, "headstart_gateway_cache_lookups", status="miss") == [2, 2, 2, 3, 3]
    ttft = h["families"]["headstart_gateway_ttft_seconds"]
    assert ttft["labels"] == [] and ttft["le"] == list(TTFT_BUCKETS)  # summed over routes
    assert ttft_counts(h) == [2, 2, 2, 3, 3]
    (row,) = ttft["values"]
    assert [sum(row[0][:i + 1]) for i in range(5)] == pytest.approx([0.04, 0.04, 0.04, 0.06,
                                                                      0.06])
    below = TTFT_BUCKETS.index(0.01)  # the bucket just under 20 ms never fills
    assert list(accumulate(row[1][below])) == [0, 0, 0, 0, 0]
    assert set(h["families"]) == {"headstart_gateway_requests", "headstart_gateway_ttft_seconds",
                                  "headstart_gateway_cache_lookups"}  # latency etc.: not kept


def test_engine_series_are_summed_and_endpoints_kept_per_replica():
    m = GatewayMetrics()
    for upstream, used in (("a", 3), ("b", 4)):  # two in-process engines
        registry = CollectorRegistry()
        Gauge("headstart_engine_kv_blocks_used", "d", registry=registry).set(used)
        m.watch_engine(registry, upstream=upstream)
    fleet = EndpointMetrics("fleet", lambda: {"http://e1/v1": EndpointGauges(2, True, 0, 0.5, 9)})
    m.registry.register(fleet)
    fleet.requests.labels("fleet", "http://e1/v1", "ok").inc(5)
    fleet.requests.labels("fleet", "http://e1/v1", "error").inc(2)
    fleet.ttft.labels("fleet", "http://e1/v1").observe(0.1)
    sampler = Sampler(m.registry, clock=Clock(50.0))
    sampler.sample()
    families = sampler.history.since(0)["families"]
    assert families["headstart_engine_kv_blocks_used"] == {
        "type": "gauge", "labels": [], "values": [[[7]]]}
    assert families["headstart_endpoint_requests"]["values"] == [
        ["fleet", "http://e1/v1", "ok", [5]], ["fleet", "http://e1/v1", "error", [2]]]
    assert not {"headstart_endpoint_ttft_seconds", "headstart_endpoint_in_flight"} & set(families)


def test_a_failing_collector_costs_its_seconds_not_the_sampler(caplog):
    class Flaky:
        down = True

        def describe(self):
            return []

        def collect(self):
            if self.down:
                raise RuntimeError("collector down")
            return []

    m = GatewayMetrics()
    flaky = Flaky()
    m.registry.register(flaky)
    m.requests.labels("faq", "ok").inc()
    clock = Clock(10.0)
    sampler = Sampler(m.registry, clock=clock)
    for _ in range(3):
        sampler.try_sample()
        clock.t += 1.0
    assert not sampler.history.samples
    assert [r.getMessage() for r in caplog.records] == [
        "dashboard history: reading the metrics failed"]  # once, not every second
    flaky.down = False
    sampler.try_sample()
    assert [t for t, _ in sampler.history.samples] == [13.0] and not sampler.failing


# --- a live gateway ----------------------------------------------------------------------

def chat_answer(text: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 8}}}).encode()


@pytest.fixture(scope="module")
def served():
    upstream = ScriptedUpstream()
    upstream.answer = (200, chat_answer("Paris is the capital."))
    server = GatewayThread({
        "upstreams": {"up": {"kind": "openai", "base_url": upstream.base_url}},
        "routes": [{"name": "faq", "models": ["faq"], "upstream": "up",
                    "cache": {"exact": {"enabled": True}}}],
    }).start()
    yield server
    server.stop()
    upstream.close()


def test_a_page_opened_after_traffic_reads_it_from_its_first_poll(served):
    base = served.base_url
    with httpx.Client(base_url=base) as client:
        for i in range(30):  # ten questions, three times each: 10 misses, 20 exact hits
            r = client.post("/v1/chat/completions", json={
                "model": "faq", "temperature": 0,
                "messages": [{"role": "user", "content": f"Question number {i % 10}?"}]})
            assert r.status_code == 200
            assert r.headers["x-cache"] == ("miss" if i < 10 else "exact")

        def opened() -> dict[str, Any]:  # what a page that has just opened asks for
            return client.get("/dashboard/data", params={"since": 0}).json()

        assert wait_until(lambda: totals(opened()["history"],
                                         "headstart_gateway_requests")[-1:] == [30], 5)
        data = opened()
    h = data["history"]
    assert h["seconds"] == 900 and len(h["t"]) >= 1
    assert h["t"] == sorted(h["t"]) and h["t"][-1] <= data["t"]
    assert len({int(t) for t in h["t"]}) == len(h["t"])  # one sample a second
    requests = totals(h, "headstart_gateway_requests", route="faq", outcome="ok")
    assert requests[0] == 0 and requests[-1] == 30  # the ring began before the traffic
    assert totals(h, "headstart_gateway_requests", outcome="error")[-1] == 0
    assert totals(h, "headstart_gateway_cache_lookups", route="faq", status="miss")[-1] == 10
    assert totals(h, "headstart_gateway_cache_lookups", route="faq", status="exact")[-1] == 20
    counts = ttft_counts(h)
    assert counts[0] == 0 and counts[-1] == 30  # a first token for each, hits included
    (ttft_row,) = h["families"]["headstart_gateway_ttft_seconds"]["values"]
    assert sum(ttft_row[0]) > 0
    assert totals(h, "headstart_gateway_prompt_tokens")[-1] == 10 * 12  # the misses' usage
    assert totals(h, "headstart_gateway_cached_prompt_tokens")[-1] == 10 * 8


def test_later_polls_get_only_newer_samples_and_plain_polls_none(served):
    base = served.base_url
    first = httpx.get(base + "/dashboard/data", params={"since": 0}).json()["history"]
    newest = first["t"][-1]
    assert wait_until(lambda: httpx.get(base + "/dashboard/data", params={
        "since": newest}).json()["history"]["t"], 5)
    later = httpx.get(base + "/dashboard/data", params={"since": newest}).json()["history"]
    assert later["t"] and min(later["t"]) > newest and len(later["t"]) <= 3
    assert "history" not in httpx.get(base + "/dashboard/data").json()  # as before
    assert httpx.get(base + "/dashboard/data", params={"since": "soon"}).status_code == 400
