"""Admission control: a request whose expected wait for its first token passes the route's
`max_queue_s` (or `limits.max_queue_s`) is answered 429 with `Retry-After` at once, instead
of joining a queue in which it, and everyone behind it, would miss the SLO.

The wait is estimated from the upstream's real state when the request is about to go
upstream (after the caches, so a cache hit is never shed):
- the in-process engine: its running and waiting requests and its measured step costs
  (`AsyncEngine.expected_wait_s`, engine/wait_estimate.py);
- any other upstream: the requests in flight to it and the latency it showed at such loads
  (`LatencyFit`: first-token time against requests in flight, fitted as answers come).
A fallback attempt (the route's upstream failed) is not shed. Shed requests are counted in
`headstart_requests_shed_total{route,reason="queue"}`.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from engine.protocol import APIError, ChatCompletionRequest, CompletionRequest
from gateway.config import GatewayConfig
from gateway.context import RequestContext
from gateway.token_estimate import estimate_prompt_tokens

T = TypeVar("T")
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


class UpstreamLoad:
    """Requests in flight to one upstream and the latency fit they feed."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.fit = LatencyFit()


class Admission:
    """Per-upstream load and the shedding decision; `on_shed(route, reason)` counts."""

    def __init__(self, config: GatewayConfig, engine: Any,
                 on_shed: Callable[[str, str], None]) -> None:
        self.config = config
        self.engine = engine
        self.on_shed = on_shed
        self.loads = {name: UpstreamLoad() for name in config.upstreams}
        self.engine_upstreams = {name for name, up in config.upstreams.items()
                                 if up.kind == "engine"}

    def expected_wait_s(self, upstream: str,
                        request: ChatCompletionRequest | CompletionRequest) -> float:
        """Seconds `request` would wait for its first token from `upstream` now."""
        if upstream in self.engine_upstreams and self.engine is not None:
            return self.engine.expected_wait_s(estimate_prompt_tokens(request))
        return self.loads[upstream].fit.predict(self.loads[upstream].in_flight)

    def check(self, ctx: RequestContext, upstream: str,
              request: ChatCompletionRequest | CompletionRequest) -> None:
        """Raise the 429 when `request` would wait past the route's limit."""
        limit = ctx.route.max_queue_s or self.config.limits.max_queue_s
        if limit is None or upstream != ctx.route.upstream:
            return
        wait = self.expected_wait_s(upstream, request)
        if wait <= limit:
            return
        self.on_shed(ctx.route.name, "queue")
        retry = max(1, math.ceil(wait - limit))
        raise APIError(
            429, f"The server is busy: the expected wait for a first token is {wait:.1f}s, "
            f"over this route's limit of {limit:g}s. Please retry after {retry}s.",
            code="server_busy", headers={"retry-after": str(retry),
                                         "retry-after-ms": str(int(retry * 1000))})

    async def watch(self, ctx: RequestContext, upstream: str,
                    request: ChatCompletionRequest | CompletionRequest,
                    stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """`stream`, admitted first (the 429 comes out of the first `anext`), counted in
        flight until closed, its first-chunk time fed to the upstream's fit."""
        try:
            self.check(ctx, upstream, request)
            load = self.loads[upstream]
            ahead, started = load.in_flight, time.perf_counter()
            load.in_flight += 1
            try:
                first = True
                async for chunk in stream:
                    if first:
                        load.fit.add(ahead, time.perf_counter() - started)
                        first = False
                    yield chunk
            finally:
                load.in_flight -= 1
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def whole(self, ctx: RequestContext, upstream: str,
                    request: ChatCompletionRequest | CompletionRequest,
                    answer: Awaitable[T]) -> T:
        """`await answer` (a whole, unstreamed answer) with the same admission and count."""
        try:
            self.check(ctx, upstream, request)
        except APIError:
            answer.close()  # type: ignore[attr-defined]
            raise
        load = self.loads[upstream]
        ahead, started = load.in_flight, time.perf_counter()
        load.in_flight += 1
        try:
            result = await answer
            load.fit.add(ahead, time.perf_counter() - started)
            return result
        finally:
            load.in_flight -= 1
