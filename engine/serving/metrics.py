"""Prometheus metrics of the engine's server: per-request latencies plus the engine's state.

Latencies (TTFT, queue time, duration) are observed as deltas pass through `observe`;
load and cache figures (running/waiting, KV blocks, prompt and prefix-hit tokens) are read
from `AsyncEngine.stats()` at scrape time, so they are never stale. Each server gets its
own registry, so several engines in one process (tests) do not collide.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.kv_handover import HandoverStats
    from engine.kv_tier import TierStats
    from engine.outputs import GenerationDelta

PREFIX = "headstart_engine"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                   1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0)


class EngineStatsCollector(Collector):
    """Turns one `EngineStats` snapshot into gauges and counters at every scrape."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        s = self.engine.stats()
        gauges = {
            "num_requests_running": ("Requests in the running batch.", s.num_running),
            "num_requests_waiting": ("Requests queued for their first step.", s.num_waiting),
            "kv_blocks_total": ("KV cache blocks in the pool.", s.kv_blocks_total),
            "kv_blocks_used": ("KV cache blocks held by live requests.", s.kv_blocks_used),
            "kv_blocks_cached": ("Unreferenced KV blocks kept for prefix reuse.",
                                 s.kv_blocks_cached),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)
        counters = {
            "prompt_tokens": ("Prompt tokens of admitted requests.", s.prompt_tokens_total),
            "prefix_hit_tokens": ("Prompt tokens reused from the prefix cache.",
                                  s.cached_tokens_total),
            "preemptions": ("Requests preempted: KV blocks ran short, or a better priority "
                            "class took the room.", s.num_preemptions),
            "priority_preemptions": ("Preemptions of a request for a better priority class.",
                                     s.num_priority_preemptions),
            "interrupted_steps": ("Steps stopped between layers for a request of a better "
                                  "priority class (computed again in the next).",
                                  s.num_interrupted_steps),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)
        if s.tier is not None:
            yield from tier_metrics(s.tier)


def tier_metrics(t: TierStats) -> Iterator[Metric]:
    """The second KV tier (`--kv-offload-mb`): what it holds, what moved, both ways."""
    yield GaugeMetricFamily(f"{PREFIX}_kv_tier_blocks",
                            "KV blocks held in the second tier.", value=t.blocks)
    yield GaugeMetricFamily(f"{PREFIX}_kv_tier_capacity_blocks",
                            "KV blocks the second tier can hold.", value=t.capacity)
    yield CounterMetricFamily(f"{PREFIX}_kv_tier_offloaded_blocks",
                              "Blocks evicted from the pool and kept in the second tier.",
                              value=t.saved)
    yield CounterMetricFamily(f"{PREFIX}_kv_tier_reloaded_blocks",
                              "Blocks loaded back from the second tier instead of recomputed.",
                              value=t.reloaded)
    moved = CounterMetricFamily(f"{PREFIX}_kv_tier_bytes",
                                "Bytes moved between the pool and the second tier.",
                                labels=["direction"])
    moved.add_metric(["offload"], t.bytes_saved)
    moved.add_metric(["reload"], t.bytes_reloaded)
    yield moved


class HandoverCollector(Collector):
    """A prefill or decode engine's KV handover (`--role`): blocks, bytes and seconds each
    way, and the handovers given up on."""

    def __init__(self, stats: HandoverStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        series = {
            "blocks": ("KV blocks handed over: sent by a prefill engine, loaded by a decode "
                       "engine.", s.sent_blocks, s.received_blocks),
            "bytes": ("Bytes of KV blocks handed over.", s.sent_bytes, s.received_bytes),
            "seconds": ("Time spent handing blocks over: copying them out of the pool "
                        "(sent), fetching and loading them (received).", s.sent_s,
                        s.received_s),
        }
        for name, (doc, sent, received) in series.items():
            family = CounterMetricFamily(f"{PREFIX}_kv_handover_{name}", doc,
                                         labels=["direction"])
            family.add_metric(["sent"], sent)
            family.add_metric(["received"], received)
            yield family
        yield CounterMetricFamily(f"{PREFIX}_kv_handover_failures",
                                  "Handovers a decode engine gave up on and computed instead.",
                                  value=s.failures)


class EngineMetrics:
    """The metrics of one engine server; `render()` is the `/metrics` body."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.registry = CollectorRegistry()
        self.ttft = Histogram(f"{PREFIX}_time_to_first_token_seconds",
                              "Arrival to first generated token.", buckets=LATENCY_BUCKETS,
                              registry=self.registry)
        self.queue_time = Histogram(f"{PREFIX}_queue_time_seconds",
                                    "Arrival to first scheduled step.", buckets=LATENCY_BUCKETS,
                                    registry=self.registry)
        self.duration = Histogram(f"{PREFIX}_request_duration_seconds",
                                  "Arrival to the last token.", buckets=LATENCY_BUCKETS,
                                  registry=self.registry)
        self.requests = Counter(f"{PREFIX}_requests", "Finished requests.",
                                ["endpoint", "finish_reason"], registry=self.registry)
        self.generation_tokens = Counter(f"{PREFIX}_generation_tokens",
                                         "Generated tokens.", registry=self.registry)
        self.registry.register(EngineStatsCollector(engine))

    async def observe(self, deltas: AsyncIterator[GenerationDelta],
                      endpoint: str) -> AsyncIterator[GenerationDelta]:
        """Pass deltas through unchanged, recording latencies and the finish reason."""
        start = time.perf_counter()
        finish = "abort"  # a stream that ends without a finish reason was cut off
        try:
            async for delta in deltas:
                if delta.ttft_s is not None:
                    self.ttft.observe(delta.ttft_s)
                if delta.queue_time_s is not None:
                    self.queue_time.observe(delta.queue_time_s)
                self.generation_tokens.inc(len(delta.token_ids))
                if delta.finish_reason is not None:
                    finish = delta.finish_reason
                yield delta
        finally:
            self.duration.observe(time.perf_counter() - start)
            self.requests.labels(endpoint=endpoint, finish_reason=finish).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
