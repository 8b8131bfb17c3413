"""Prometheus metrics of one gateway app, in its own registry (several apps in one process,
as in tests, do not collide). Served at `GET /metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class GatewayMetrics:
    """TTFT, total latency and upstream time by route and outcome; cache outcomes; tokens."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ttft = Histogram("headstart_gateway_ttft_seconds",
                              "Time from request to the first chunk sent to the client",
                              ["route", "cache"], buckets=LATENCY_BUCKETS, registry=r)
        self.latency = Histogram("headstart_gateway_request_seconds",
                                 "Time from request to the end of the answer",
                                 ["route", "outcome"], buckets=LATENCY_BUCKETS, registry=r)
        self.upstream_time = Histogram("headstart_gateway_upstream_seconds",
                                       "Time spent waiting on an upstream, per attempt",
                                       ["route", "upstream", "outcome"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.requests = Counter("headstart_gateway_requests",
                                "Requests by route and outcome (ok, error, aborted)",
                                ["route", "outcome"], registry=r)
        self.cache = Counter("headstart_gateway_cache_lookups",
                             "Cache outcomes: exact, semantic, miss, bypass",
                             ["route", "status"], registry=r)
        self.fallbacks = Counter("headstart_gateway_fallbacks",
                                 "Requests served by a route's fallback upstream",
                                 ["route", "upstream"], registry=r)
        self.prompt_tokens = Counter("headstart_gateway_prompt_tokens",
                                     "Prompt tokens of answered requests", ["route"], registry=r)
        self.cached_tokens = Counter("headstart_gateway_cached_prompt_tokens",
                                     "Prompt tokens the upstream reused from its prefix cache",
                                     ["route"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
