"""Prometheus metrics of one gateway app, in its own registry (several apps in one process,
as in tests, do not collide). Served at `GET /metrics`.

The cache's own counters (`cache/stats.py`) are read at scrape time by `CacheStatsCollector`
rather than mirrored on every request, so exporting them costs the request path nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Labelled:
    """A labelled metric whose children are remembered: `labels()` on a prometheus metric
    takes a lock and rebuilds the label tuple every call, several times per request; the
    label sets here are few (routes x outcomes), so each child is looked up once."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class GatewayMetrics:
    """TTFT, total latency and upstream time by route and outcome; cache outcomes; tokens."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

        def histogram(name: str, doc: str, labels: list[str]) -> Labelled:
            return Labelled(Histogram(name, doc, labels, buckets=LATENCY_BUCKETS,
                                      registry=self.registry))

        def counter(name: str, doc: str, labels: list[str]) -> Labelled:
            return Labelled(Counter(name, doc, labels, registry=self.registry))

        self.ttft = histogram("headstart_gateway_ttft_seconds",
                              "Time from request to the first chunk sent to the client",
                              ["route", "cache"])
        self.latency = histogram("headstart_gateway_request_seconds",
                                 "Time from request to the end of the answer",
                                 ["route", "outcome"])
        self.upstream_time = histogram("headstart_gateway_upstream_seconds",
                                       "Time spent waiting on an upstream, per attempt",
                                       ["route", "upstream", "outcome"])
        self.requests = counter("headstart_gateway_requests",
                                "Requests by route and outcome (ok, error, aborted)",
                                ["route", "outcome"])
        self.cache = counter("headstart_gateway_cache_lookups",
                             "Cache outcomes: exact, semantic, miss, bypass", ["route", "status"])
        self.fallbacks = counter("headstart_gateway_fallbacks",
                                 "Requests served by a route's fallback upstream",
                                 ["route", "upstream"])
        self.prompt_tokens = counter("headstart_gateway_prompt_tokens",
                                     "Prompt tokens of answered requests", ["route"])
        self.cached_tokens = counter("headstart_gateway_cached_prompt_tokens",
                                     "Prompt tokens the upstream reused from its prefix cache",
                                     ["route"])
        self._cache_collector: CacheStatsCollector | None = None

    def watch_cache(self, snapshot: Callable[[], dict[str, dict[str, int]]]) -> None:
        """Export the cache counters `snapshot()` returns ({route: {counter: n}}) at scrape
        time (idempotent: a second call replaces the source)."""
        if self._cache_collector is None:
            self._cache_collector = CacheStatsCollector(snapshot)
            self.registry.register(self._cache_collector)
        self._cache_collector.snapshot = snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)


CACHE_COUNTERS = {
    "hits": "Cache hits (exact and semantic)",
    "exact_hits": "Exact-cache hits",
    "semantic_hits": "Semantic-cache hits",
    "misses": "Lookups that found nothing servable",
    "bypasses": "Requests that skipped the cache (policy off, no-cache, not cacheable)",
    "guard_rejections": "Semantic candidates the guard rejected (near misses)",
    "stores": "Answers stored",
    "store_errors": "Cache store failures (lookups served as misses, answers not stored)",
}


class CacheStatsCollector:
    """`headstart_cache_<counter>_total{route}` from the cache's in-process counters."""

    def __init__(self, snapshot: Callable[[], dict[str, dict[str, int]]]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Any]:
        return []  # unchecked collector: families are produced at scrape time

    def collect(self) -> Iterator[CounterMetricFamily]:
        routes = self.snapshot()
        for name, doc in CACHE_COUNTERS.items():
            family = CounterMetricFamily(f"headstart_cache_{name}", doc, labels=["route"])
            for route, counters in routes.items():
                family.add_metric([route], counters.get(name, 0))
            yield family
