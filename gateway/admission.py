"""Admission control: a request whose expected queue wait passes the route's `max_queue_s`
(or `limits.max_queue_s`) is answered 429 with `Retry-After` at once, instead of joining a
queue in which it, and everyone behind it, would miss the SLO.

The wait is estimated from the upstream's real state when the request is about to go
upstream (after the caches, so a cache hit is never shed), and counts only the time spent
behind other requests, never the request's own service, so an idle upstream refuses
nothing:
- the in-process engine: its running and waiting requests and its measured step costs
  (`AsyncEngine.expected_wait_s`, engine/wait_estimate.py); with a limit set, a short
  request at start measures those costs before the first client arrives (`warm_up`);
- any other upstream: the requests in flight to it and the latency it showed at such loads
  (`LatencyFit`: first-token time against requests in flight; the wait is what the load
  adds to the time of a request alone).
A fallback attempt (the route's upstream failed) is not shed. Shed requests are counted in
`headstart_requests_shed_total{route,reason="queue"}`.

Priorities (a route's `priority:` or the request's own, vLLM's meaning: lower first): the
wait counts only the requests of the same class or a better one, since the engine's
priority scheduling puts a request ahead of worse classes and takes their slots, so an
interactive request is never refused because batch work fills the queue. A request of a
worse class than the default (priority > 0) is not shed by `limits.max_queue_s`: batch work
waits its turn; only its route's own `max_queue_s` sheds it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from gateway.config import GatewayConfig
from gateway.context import RequestContext
from openai_api import APIError

if TYPE_CHECKING:
    from engine import AsyncEngine

T = TypeVar("T")
log = logging.getLogger("headstart.gateway")
FIT_DECAY = 0.97  # weight left to a latency sample after each newer one (~30 samples)


class LatencyFit:
    """First-token time as a straight line in the requests in flight at arrival, by
    exponentially weighted least squares; never decreasing in the load."""

    def __init__(self) -> None:
        self.w = self.x = self.y = self.xx = self.xy = 0.0

    def add(self, in_flight: int, seconds: float) -> None:
        d = FIT_DECAY
        self.w, self.x, self.y = self.w * d + 1, self.x * d + in_flight, self.y * d + seconds
        self.xx = self.xx * d + in_flight * in_flight
        self.xy = self.xy * d + in_flight * seconds

    def predict(self, in_flight: int) -> float:
        if self.w == 0:
            return 0.0  # nothing seen yet: admit
        mx, my = self.x / self.w, self.y / self.w
        var = self.xx / self.w - mx * mx
        slope = max(0.0, (self.xy / self.w - mx * my) / var) if var > 1e-9 else 0.0
        return max(0.0, my + slope * (in_flight - mx))

    def queueing_s(self, in_flight: int) -> float:
        """What `in_flight` requests ahead add to a request's first-token time."""
        return max(0.0, self.predict(in_flight) - self.predict(0))


class UpstreamLoad:
    """Requests in flight to one upstream, by priority, and the latency fit they feed."""

    def __init__(self) -> None:
        self.by_priority: Counter[int] = Counter()
        self.fit = LatencyFit()

    @property
    def in_flight(self) -> int:
        return sum(self.by_priority.values())

    def done(self, priority: int) -> None:
        self.by_priority[priority] -= 1
        if not self.by_priority[priority]:
            del self.by_priority[priority]  # clients may send any number of classes

    def ahead(self, priority: int) -> int:
        """Requests in flight that a request of `priority` waits behind: its class or better."""
        return sum(n for p, n in self.by_priority.items() if p <= priority)


class Admission:
    """Per-upstream load and the shedding decision; `on_shed(route, reason)` counts."""

    def __init__(self, config: GatewayConfig, engine: AsyncEngine | None,
                 on_shed: Callable[[str, str], None]) -> None:
        self.config = config
        self.engine = engine
        self.on_shed = on_shed
        self.loads = {name: UpstreamLoad() for name in config.upstreams}
        self.engine_upstreams = {name for name, up in config.upstreams.items()
                                 if up.kind == "engine"}

    def expected_wait_s(self, upstream: str, priority: int = 0) -> float:
        """Seconds a request of `priority` would wait behind others at `upstream` now."""
        if upstream in self.engine_upstreams and self.engine is not None:
            return self.engine.expected_wait_s(priority)
        load = self.loads[upstream]
        return load.fit.queueing_s(load.ahead(priority))

    def limit_s(self, ctx: RequestContext) -> float | None:
        """The longest wait `ctx` may face: its route's, else the gateway's for classes at
        or above the default (a batch class, priority > 0, waits its turn)."""
        if ctx.route.max_queue_s is not None:
            return ctx.route.max_queue_s
        return self.config.limits.max_queue_s if (ctx.priority or 0) <= 0 else None

    def check(self, ctx: RequestContext, upstream: str) -> None:
        """Raise the 429 when the request would wait past the route's limit."""
        limit = self.limit_s(ctx)
        if limit is None or upstream != ctx.route.upstream:
            return
        wait = self.expected_wait_s(upstream, ctx.priority or 0)
        if wait <= limit:
            return
        self.on_shed(ctx.route.name, "queue")
        retry = max(1, math.ceil(wait - limit))
        raise APIError(
            429, f"The server is busy: the expected wait is {wait:.1f}s, over this route's "
            f"limit of {limit:g}s. Please retry after {retry}s.",
            code="server_busy", headers={"retry-after": str(retry),
                                         "retry-after-ms": str(int(retry * 1000))})

    async def warm_up(self) -> None:
        """With a queue limit and the in-process engine: one short request before serving,
        so the first burst is judged by measured step costs rather than priors (and does
        not pay the engine's first-step costs)."""
        limited = self.config.limits.max_queue_s or any(r.max_queue_s for r in
                                                        self.config.routes)
        if not limited or self.engine is None:
            return
        try:
            await self.engine.warm_up()
        except Exception as e:  # noqa: BLE001 - without it, priors stand in; still serve
            log.warning("admission: the engine's warm-up failed (%s); estimating from priors "
                        "until it has run", e)

    async def watch(self, ctx: RequestContext, upstream: str,
                    stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """`stream`, admitted first (the 429 comes out of the first `anext`), counted in
        flight until closed, its first-chunk time fed to the upstream's fit."""
        try:
            self.check(ctx, upstream)
            load, priority = self.loads[upstream], ctx.priority or 0
            ahead, started = load.ahead(priority), time.perf_counter()
            load.by_priority[priority] += 1
            try:
                first = True
                async for chunk in stream:
                    if first:
                        load.fit.add(ahead, time.perf_counter() - started)
                        first = False
                    yield chunk
            finally:
                load.done(priority)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def whole(self, ctx: RequestContext, upstream: str, answer: Awaitable[T]) -> T:
        """`await answer` (a whole, unstreamed answer) with the same admission and count."""
        try:
            self.check(ctx, upstream)
        except APIError:
            answer.close()  # type: ignore[attr-defined]
            raise
        load, priority = self.loads[upstream], ctx.priority or 0
        ahead, started = load.ahead(priority), time.perf_counter()
        load.by_priority[priority] += 1
        try:
            result = await answer
            load.fit.add(ahead, time.perf_counter() - started)
            return result
        finally:
            load.done(priority)
