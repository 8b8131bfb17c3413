"""`GET /dashboard/data`: the registry `/metrics` renders, as compact JSON for the page.

The page polls once a second and works out rates and windowed quantiles itself from the
differences between polls, so this side keeps no state and does no arithmetic: it walks the
families once and writes each sample's label values and value in one flat list. Histograms
keep Prometheus's cumulative bucket counts (the last one is +Inf, the total).

    {"t": 1764043200.5, "families": {
       "headstart_gateway_requests": {"type": "counter", "labels": ["route", "outcome"],
                                      "values": [["support", "ok", 12.0], ...]},
       "headstart_gateway_ttft_seconds": {"type": "histogram", "labels": ["route", "cache"],
                                          "le": [0.001, ..., 120.0],
                                          "values": [["support", "miss", 0.84, [0, ..., 7]]]}}}

A histogram's entry is its label values, then the sum, then the cumulative counts.

`?since=T` adds `"history"`: the samples of the last 15 minutes taken after T
(gateway/dashboard/history.py), so a page that just opened (`since=0`) draws the traffic
before it at once, and then asks only for the samples it lacks.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from gateway.config import GatewayConfig
from gateway.dashboard.history import Sampler

PREFIX = "headstart_"
SCALAR_SUFFIXES = {"counter": "_total", "gauge": "", "unknown": ""}


class DashboardFeed:
    """The `/dashboard/data` body: what the config says (SLO, poll interval, routes and
    their upstreams), fixed at start, the registry's families, read per poll, and the
    history `sampler` keeps. `guarded`: the page needs the admin key."""

    def __init__(self, config: GatewayConfig, registry: CollectorRegistry,
                 guarded: bool = False) -> None:
        self.registry = registry
        self.sampler = Sampler(registry)
        self.setup = {
            "guarded": guarded,
            "slo_ms": config.dashboard.slo_ms,
            "refresh_s": config.dashboard.refresh_s,
            "routes": [{"name": r.name, "upstream": r.upstream, "fallback": r.fallback,
                        "cached": r.caching_enabled()} for r in config.routes],
            "upstreams": {name: up.kind for name, up in config.upstreams.items()},
        }

    def body(self, since: float | None = None) -> bytes:
        snapshot = {**self.setup, **registry_snapshot(self.registry)}
        if since is not None:
            snapshot["history"] = self.sampler.history.since(since)
        return json.dumps(snapshot, separators=(",", ":")).encode()


def registry_snapshot(registry: CollectorRegistry, prefix: str = PREFIX) -> dict[str, Any]:
    """Every family of `registry` whose name starts with `prefix`, compacted; families with
    no sample yet are left out (a labelled metric nobody has touched)."""
    families: dict[str, Any] = {}
    for family in registry.collect():
        if not family.name.startswith(prefix):
            continue
        if family.type == "histogram":
            compact = _histogram(family)
        elif family.type in SCALAR_SUFFIXES:
            compact = _scalar(family, family.name + SCALAR_SUFFIXES[family.type])
        else:
            continue  # summaries, info, state sets: none of ours
        if compact["values"]:
            families[family.name] = compact
    return {"t": round(time.time(), 3), "families": families}


def _label_names(samples: list[Any], skip: str = "") -> list[str]:
    names: dict[str, None] = {}
    for sample in samples:
        names.update(dict.fromkeys(k for k in sample.labels if k != skip))
    return list(names)


def _scalar(family: Metric, sample_name: str) -> dict[str, Any]:
    samples = [s for s in family.samples if s.name == sample_name]
    labels = _label_names(samples)
    return {"type": family.type if family.type != "unknown" else "gauge", "labels": labels,
            "values": [[s.labels.get(k, "") for k in labels] + [s.value] for s in samples]}


def _histogram(family: Metric) -> dict[str, Any]:
    """Bucket counts per label set, in the order of the bounds (`le`, +Inf last)."""
    buckets = [s for s in family.samples if s.name == family.name + "_bucket"]
    labels = _label_names(buckets, skip="le")
    bounds = sorted({float(s.labels["le"]) for s in buckets})
    index = {bound: i for i, bound in enumerate(bounds)}
    series: dict[tuple[str, ...], list[Any]] = {}
    for s in buckets:
        key = tuple(s.labels.get(k, "") for k in labels)
        entry = series.setdefault(key, [0.0, [0.0] * len(bounds)])
        entry[1][index[float(s.labels["le"])]] = s.value
    for s in family.samples:
        if s.name == family.name + "_sum":
            key = tuple(s.labels.get(k, "") for k in labels)
            if key in series:
                series[key][0] = s.value
    return {"type": "histogram", "labels": labels,
            "le": [b for b in bounds if not math.isinf(b)],
            "values": [[*key, total, counts] for key, (total, counts) in series.items()]}
