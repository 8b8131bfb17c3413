"""Per-endpoint Prometheus metrics of a fleet upstream, `headstart_endpoint_*`, labelled
`upstream` (its key under `upstreams:`) and `endpoint` (the replica's base URL):

- `headstart_endpoint_requests_total{outcome}`: attempts by outcome: `ok`, `error` (failed
  after its first chunk), `retried` (failed before it; the request went on to another
  replica), `rejected` (a 4xx the client must fix), `aborted` (the client left);
- `headstart_endpoint_errors_total{reason}`: `connect`, `timeout`, `status` (a 5xx or 429),
  `stream_cut` (the answer broke off), `bad_answer`;
- `headstart_endpoint_ttft_seconds`, `headstart_endpoint_latency_seconds`: the replica's time
  to its first chunk and to its last, per answered attempt;
- `headstart_endpoint_picks_total{reason}`: why the picker chose it (`prefix`, `session`,
  `least_loaded`, `round_robin`, `random`, `override`);
- `headstart_endpoint_prompt_tokens_total`, `headstart_endpoint_cached_tokens_total`: the
  answers' usage, so the prefix-cache hit ratio per replica is their quotient;
- `headstart_endpoint_kv_events_total`: KV event batches received from it;
- gauges read at scrape time: `headstart_endpoint_in_flight` (this gateway's requests there),
  `headstart_endpoint_healthy` (1 or 0), `headstart_endpoint_queued` (its waiting requests at
  the last probe), `headstart_endpoint_kv_usage` (0..1), `headstart_endpoint_blocks` (blocks
  the picker believes it holds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from gateway.metrics import LATENCY_BUCKETS, Labelled

LABELS = ["upstream", "endpoint"]


@dataclass
class EndpointGauges:
    in_flight: int
    healthy: bool
    queued: int
    kv_usage: float
    blocks: int


class EndpointMetrics:
    """The counters and histograms above, plus a gauge snapshot taken at scrape time."""

    def __init__(self, upstream: str,
                 gauges: Callable[[], dict[str, EndpointGauges]]) -> None:
        self.upstream = upstream
        self.gauges = gauges
        self.requests = Labelled("headstart_endpoint_requests", "Attempts per replica by outcome",
                                 LABELS + ["outcome"])
        self.errors = Labelled("headstart_endpoint_errors", "Failed attempts per replica by reason",
                               LABELS + ["reason"])
        self.ttft = Labelled("headstart_endpoint_ttft_seconds",
                             "Time from sending to a replica to its first chunk", LABELS,
                             LATENCY_BUCKETS)
        self.latency = Labelled("headstart_endpoint_latency_seconds",
                                "Time from sending to a replica to its last chunk", LABELS,
                                LATENCY_BUCKETS)
        self.picks = Labelled("headstart_endpoint_picks", "Why the picker chose a replica",
                              LABELS + ["reason"])
        self.prompt_tokens = Labelled("headstart_endpoint_prompt_tokens",
                                      "Prompt tokens of answers per replica", LABELS)
        self.cached_tokens = Labelled("headstart_endpoint_cached_tokens",
                                      "Prompt tokens a replica reused from its prefix cache",
                                      LABELS)
        self.kv_events = Labelled("headstart_endpoint_kv_events",
                                  "KV event batches received per replica", LABELS)
        self._all = [self.requests, self.errors, self.ttft, self.latency, self.picks,
                     self.prompt_tokens, self.cached_tokens, self.kv_events]

    def describe(self) -> list[Any]:
        return []  # families are produced at scrape time

    def collect(self) -> Iterator[Any]:
        for metric in self._all:
            yield metric.collect()
        snapshot = self.gauges()
        docs = {"in_flight": "This gateway's requests at a replica",
                "healthy": "1 when requests may go to the replica",
                "queued": "Requests waiting at the replica at its last probe",
                "kv_usage": "Share of the replica's KV blocks in use at its last probe",
                "blocks": "KV blocks the picker believes the replica holds"}
        for field, doc in docs.items():
            family = GaugeMetricFamily(f"headstart_endpoint_{field}", doc, labels=LABELS)
            for endpoint, gauges in snapshot.items():
                family.add_metric([self.upstream, endpoint], float(getattr(gauges, field)))
            yield family
