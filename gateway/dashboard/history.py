"""The last 15 minutes of what the page charts, one sample a second, so that a page opened
after traffic shows that traffic at once instead of what it has polled itself.

A background task (`Sampler.run`, started by the app's lifespan) reads the registry once a
second, keeps only the series the charts and the tiles' windows read, summed over the labels
they do not use, and appends them to a ring of 900 samples. Requests never touch it: the
values are the counters and gauges `/metrics` already serves.

    series kept                                    labels kept
    headstart_gateway_requests                     route, outcome
    headstart_gateway_cache_lookups                route, status
    headstart_gateway_ttft_seconds (histogram)     none (the charts read all routes)
    headstart_gateway_{,cached_}prompt_tokens      none
    headstart_engine_{prompt,prefix_hit}_tokens    none
    headstart_engine_{kv_blocks_*,num_requests_*}  none
    headstart_endpoint_requests                    upstream, endpoint, outcome

`History.since(t)` is the part of the ring after `t`, shaped like `/dashboard/data`'s
`families` but with a list over the samples where a value stood, each list the value at the
first sample and then the change from the sample before (mostly zeros, so 900 samples stay
a few tens of kB):

    {"seconds": 900, "t": [1764043200.001, 1764043201.002, ...],
     "families": {"headstart_gateway_requests": {"type": "counter", "labels": ["route", "outcome"],
                    "values": [["faq", "ok", [12, 0, 3, ...]], ...]},
                  "headstart_gateway_ttft_seconds": {"type": "histogram", "labels": [],
                    "le": [0.001, ...], "values": [[[0.84, 0, 0.1, ...], [[0, 0, ...], ...]]]}}}

A histogram's row is its label values, the sum's list, then one list per bucket (cumulative
counts, +Inf last). A series first seen after the oldest sample reads 0 before it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

log = logging.getLogger("headstart.gateway")

SECONDS = 900  # the ring: 15 minutes at one sample a second
KEPT: dict[str, tuple[str, ...]] = {  # family -> the labels kept; the others are summed over
    "headstart_gateway_requests": ("route", "outcome"),
    "headstart_gateway_cache_lookups": ("route", "status"),
    "headstart_gateway_ttft_seconds": (),
    "headstart_gateway_prompt_tokens": (),
    "headstart_gateway_cached_prompt_tokens": (),
    "headstart_engine_prompt_tokens": (),
    "headstart_engine_prefix_hit_tokens": (),
    "headstart_engine_kv_blocks_used": (),
    "headstart_engine_kv_blocks_total": (),
    "headstart_engine_kv_blocks_cached": (),
    "headstart_engine_num_requests_running": (),
    "headstart_engine_num_requests_waiting": (),
    "headstart_endpoint_requests": ("upstream", "endpoint", "outcome"),
}
SUM = "sum"  # a histogram's sum, beside its buckets (keyed by their upper bound)

# (family, label values, part): part is "" for a counter or gauge, SUM or a bucket's bound
Column = tuple[str, tuple[str, ...], str | float]


@dataclass
class Shape:
    """How one family's rows read: its type, the label names kept, a histogram's bounds."""

    type: str
    labels: tuple[str, ...]
    bounds: set[float] = field(default_factory=set)  # +Inf included


def reduce(families: Iterable[Metric], shapes: dict[str, Shape]) -> dict[Column, float]:
    """The values of the kept series among `families` (one registry collection), summed
    over the labels not kept; `shapes` learns each family's type and bounds."""
    values: dict[Column, float] = {}
    for family in families:
        kept = KEPT.get(family.name)
        if kept is None:
            continue
        kind = {"unknown": "gauge"}.get(family.type, family.type)
        shape = shapes.setdefault(family.name, Shape(kind, kept))
        for s in family.samples:
            part: str | float
            if kind == "histogram":
                if s.name == family.name + "_bucket":
                    part = float(s.labels["le"])
                    shape.bounds.add(part)
                elif s.name == family.name + "_sum":
                    part = SUM
                else:
                    continue  # _count (the +Inf bucket) and _created
            elif s.name == family.name + ("_total" if kind == "counter" else ""):
                part = ""
            else:
                continue  # a counter's _created
            key = (family.name, tuple(s.labels.get(k, "") for k in kept), part)
            values[key] = values.get(key, 0.0) + s.value
    return values


class History:
    """A ring of at most `seconds` samples, at most one per whole second of their time,
    none older than `seconds` before the newest. A sample is its time and one float per
    column in the order columns were first seen (`array`: 8 bytes a value)."""

    def __init__(self, seconds: int = SECONDS) -> None:
        self.seconds = seconds
        self.columns: dict[Column, int] = {}
        self.shapes: dict[str, Shape] = {}
        self.samples: deque[tuple[float, array]] = deque(maxlen=seconds)

    def taken(self, t: float) -> bool:
        """Whether the newest sample is from the second of `t` or a later one."""
        return bool(self.samples) and math.floor(t) <= math.floor(self.samples[-1][0])

    def record(self, t: float, values: dict[Column, float]) -> bool:
        """Append a sample taken at `t`, dropping those `seconds` or more older; False
        (nothing kept) when that second has its sample already."""
        if self.taken(t):
            return False
        for key in values:
            self.columns.setdefault(key, len(self.columns))
        row = array("d", bytes(8 * len(self.columns)))
        for key, value in values.items():
            row[self.columns[key]] = value
        self.samples.append((t, row))
        while self.samples[0][0] <= t - self.seconds:
            self.samples.popleft()
        return True

    def since(self, t: float) -> dict[str, Any]:
        """The samples taken after `t`, as the page reads them (module docstring)."""
        times = [when for when, _ in self.samples if when > t]
        picked = [row for when, row in self.samples if when > t]
        parts: dict[str, dict[tuple[str, ...], dict[str | float, list[float | int]]]] = {}
        for (name, labels, part), i in self.columns.items():
            series = _changes([row[i] if i < len(row) else 0.0 for row in picked])
            parts.setdefault(name, {}).setdefault(labels, {})[part] = series
        families: dict[str, Any] = {}
        for name, rows in parts.items():
            shape = self.shapes[name]
            family: dict[str, Any] = {"type": shape.type, "labels": list(shape.labels)}
            if shape.type == "histogram":
                bounds = sorted(shape.bounds)
                family["le"] = bounds[:-1] if bounds and math.isinf(bounds[-1]) else bounds
                zeros = [0] * len(picked)
                family["values"] = [[*labels, series.get(SUM, zeros),
                                     [series.get(b, zeros) for b in bounds]]
                                    for labels, series in rows.items()]
            else:
                family["values"] = [[*labels, series[""]] for labels, series in rows.items()]
            families[name] = family
        return {"seconds": self.seconds, "t": times, "families": families}


def _changes(values: list[float]) -> list[float | int]:
    """The first value, then each one's change from the one before (whole numbers written
    as such, the others to 6 places: the page adds them back up)."""
    out: list[float | int] = []
    before = 0.0
    for value in values:
        change = value - before
        out.append(int(change) if change.is_integer() else round(change, 6))
        before = value
    return out


class Sampler:
    """Fills a `History` from a registry once a second. `clock`: wall-clock seconds (the
    page's time axis); tests pass their own."""

    def __init__(self, registry: CollectorRegistry, history: History | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.history = history or History()
        self.clock = clock
        self.failing = False  # the last try failed (logged)

    def sample(self) -> bool:
        """Read the registry and record it (False: this second has its sample already)."""
        t = round(self.clock(), 3)
        if self.history.taken(t):
            return False
        return self.history.record(t, reduce(self.registry.collect(), self.history.shapes))

    def start(self) -> asyncio.Task[None]:
        """The first sample now (the history begins before any request), then `run` in a
        task (the app's lifespan cancels it)."""
        self.try_sample()
        return asyncio.create_task(self.run())

    def try_sample(self) -> None:
        """`sample`, a failure logged once until a sample succeeds again: a collector that
        fails fails `/metrics` too, and the history goes on without that second."""
        try:
            self.sample()
        except Exception:
            if not self.failing:
                log.exception("dashboard history: reading the metrics failed")
            self.failing = True
        else:
            self.failing = False

    async def run(self) -> None:
        """A sample a second, just after each second turns, until cancelled."""
        while True:
            await asyncio.sleep(1.001 - self.clock() % 1.0)
            self.try_sample()
