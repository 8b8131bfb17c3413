"""Prometheus metrics of one gateway app, in its own registry (several apps in one process,
as in tests, do not collide). Served at `GET /metrics`.

The cache's own counters (`cache/stats.py`) are read at scrape time by `CacheStatsCollector`
rather than mirrored on every request, so exporting them costs the request path nothing.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0)
# TTFT is judged against an SLO of a few hundred ms (700 by default): finer bounds there, so
# p50/p95 read from the buckets (the dashboard, histogram_quantile) land within tens of ms
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3,
                0.4, 0.5, 0.7, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class CounterValue:
    """One labelled counter: a plain float the event loop adds to (no lock: the gateway
    updates its metrics from the loop's thread only)."""

    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramValue:
    """One labelled histogram: a count per bucket (the last is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # first bucket with value <= le
        self.sum += value


class Labelled:
    """A labelled counter or histogram whose children are plain values, exported at
    scrape time: prometheus_client's own metrics take a lock on every update and rebuild
    the label tuple on every `labels()`, ten times per request on the hot path."""

    def __init__(self, name: str, doc: str, labels: list[str],
                 buckets: tuple[float, ...] | None = None) -> None:
        self.name, self.doc, self.label_names = name, doc, labels
        self.buckets = buckets  # None: a counter
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name}: expected labels {self.label_names}")
            child = CounterValue() if self.buckets is None else HistogramValue(self.buckets)
            self._children[values] = child
        return child

    def collect(self) -> CounterMetricFamily | HistogramMetricFamily:
        if self.buckets is None:
            counters = CounterMetricFamily(self.name, self.doc, labels=self.label_names)
            for values, child in list(self._children.items()):
                counters.add_metric(list(values), child.value, created=child.created)
            return counters
        family = HistogramMetricFamily(self.name, self.doc, labels=self.label_names)
        les = [floatToGoString(b) for b in self.buckets] + ["+Inf"]
        for values, child in list(self._children.items()):
            cumulative = list(accumulate(child.counts))
            family.add_metric(list(values), list(zip(les, cumulative, strict=True)), child.sum)
        return family


class _LabelledCollector:
    """Exposes `Labelled` metrics through a registry."""

    def __init__(self, metrics: list[Labelled]) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return [m.collect() for m in self.metrics]

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        for metric in self.metrics:
            yield metric.collect()


class GatewayMetrics:
    """TTFT, total latency and upstream time by route and outcome; cache outcomes; tokens."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

        metrics: list[Labelled] = []

        def histogram(name: str, doc: str, labels: list[str],
                      buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Labelled:
            metrics.append(Labelled(name, doc, labels, buckets))
            return metrics[-1]

        def counter(name: str, doc: str, labels: list[str]) -> Labelled:
            metrics.append(Labelled(name, doc, labels))
            return metrics[-1]

        self.ttft = histogram("headstart_gateway_ttft_seconds",
                              "Time from request to the first chunk sent to the client",
                              ["route", "cache"], TTFT_BUCKETS)
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
        self.shed = counter("headstart_requests_shed",
                            "Requests refused with 429: reason queue (expected wait over "
                            "max_queue_s), rpm or tpm (a key's or tenant's limit)",
                            ["route", "reason"])
        self.rate_limit_store_errors = counter(
            "headstart_ratelimit_store_errors",
            "Rate-limit checks that found Redis unreachable and let the request pass", [])
        self.registry.register(_LabelledCollector(metrics))
        self._cache_collector: CacheStatsCollector | None = None
        self._engines: EngineSeries | None = None

    def watch_cache(self, snapshot: Callable[[], dict[str, dict[str, float]]]) -> None:
        """Export the cache counters `snapshot()` returns ({route: {counter: n}}) at scrape
        time (idempotent: a second call replaces the source)."""
        if self._cache_collector is None:
            self._cache_collector = CacheStatsCollector(snapshot)
            self.registry.register(self._cache_collector)
        self._cache_collector.snapshot = snapshot

    def count_shed(self, route: str, reason: str) -> None:
        self.shed.labels(route, reason).inc()

    def count_rate_limit_store_error(self) -> None:
        self.rate_limit_store_errors.labels().inc()

    def watch_engine(self, registry: CollectorRegistry, upstream: str | None = None) -> None:
        """Export an in-process engine's own series (`engine.serving.metrics.EngineMetrics.registry`,
        the names `headstart engine` serves) with the gateway's; `upstream` labels them when
        the gateway runs more than one engine."""
        if self._engines is None:
            self._engines = EngineSeries()
            self.registry.register(self._engines)
        self._engines.sources[upstream] = registry

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
    "semantic_skips": "Semantic lookups skipped on a route whose hit rate stays near zero",
    "grey_zone": "Misses with a grey-zone candidate for the route's judge",
    "learned_hits": "Semantic hits served under the verifier's threshold by judged evidence",
    "promotions": "Grey-zone questions a judge made aliases of the entry they nearly matched",
    "refusals": "Grey-zone questions a judge refused: never served that entry",
    "judge_errors": "Grey-zone pairs the judge gave no verdict on (failed, down, timed out)",
    "judge_shed": "Grey-zone pairs dropped unjudged (queue full, gateway busy)",
}
CACHE_GAUGES = {
    "false_hit_estimate": "Estimated share of the route's semantic hits that were wrong "
                          "(hits under the threshold times the no-rate judged there)",
    "judged_bar": "The lowest verifier score the route serves now (its threshold until "
                  "judged evidence lowers it)",
}


class CacheStatsCollector:
    """`headstart_cache_<counter>_total{route}` from the cache's in-process counters, and
    `headstart_cache_<gauge>{route}` for the routes whose snapshot carries one (a judge's)."""

    def __init__(self, snapshot: Callable[[], dict[str, dict[str, float]]]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Any]:
        return []  # unchecked collector: families are produced at scrape time

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        routes = self.snapshot()
        for name, doc in CACHE_COUNTERS.items():
            family = CounterMetricFamily(f"headstart_cache_{name}", doc, labels=["route"])
            for route, counters in routes.items():
                family.add_metric([route], counters.get(name, 0))
            yield family
        for name, doc in CACHE_GAUGES.items():
            gauge = GaugeMetricFamily(f"headstart_cache_{name}", doc, labels=["route"])
            for route, values in routes.items():
                if name in values:
                    gauge.add_metric([route], values[name])
            yield gauge


class EngineSeries:
    """The families of one or more engine registries. One engine's go out unchanged; with
    several, each sample gets an `upstream` label and same-named families are merged (the
    text format allows one family per name)."""

    def __init__(self) -> None:
        self.sources: dict[str | None, CollectorRegistry] = {}

    def describe(self) -> list[Any]:
        return []  # unchecked collector, like CacheStatsCollector

    def collect(self) -> Iterator[Metric]:
        if list(self.sources) == [None]:
            yield from self.sources[None].collect()
            return
        merged: dict[str, Metric] = {}
        for upstream, registry in self.sources.items():
            for family in registry.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation,
                                                        family.type, family.unit)
                into.samples += [s._replace(labels={**s.labels, "upstream": upstream or ""})
                                 for s in family.samples]
        yield from merged.values()


def later(record: Callable[..., object], *args: object) -> None:
    """Run `record(*args)` once the current step of the request's task is done: after the
    answer (or its first frame) is written. After the gateway idles on the upstream, every
    line of Python runs from cold caches, and bookkeeping done before the write would add
    to the client's latency."""
    asyncio.get_running_loop().call_soon(record, *args)
