"""The one way upstream, for every request the gateway sends: the client's, a decomposed
part, the maps of a long document, a summary of dropped turns, a prewarm read.

`UpstreamCaller` tries the route's upstream, then its fallback when the first fails before
its first chunk (a 5xx or a timeout); bounds each wait by the route's `timeout_s` and the
whole answer by its `total_timeout_s`; admits through admission control (a 429 before
anything is sent); and records the upstream's time, the fallbacks, and each upstream's
prefill rate (which compression weighs). A streamed call is an `UpstreamStream`, which says
who answered (`answered`) once its first chunk is in; an unstreamed one (`whole`) returns
the answer with the same `Answered`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.context import RequestContext
from gateway.metrics import GatewayMetrics, later
from gateway.upstream_timeout import UpstreamTimeout
from gateway.upstreams import Upstream, UpstreamCall
from openai_api import APIError, Chunk, GenerationRequest, Usage, WholeAnswer

if TYPE_CHECKING:
    from gateway.admission import Admission
    from gateway.config import RouteConfig

log = logging.getLogger("headstart.gateway")
MIN_PREFILL_SAMPLE = 256  # fresh prompt tokens below this say little about an upstream's rate


@dataclass(frozen=True)
class Answered:
    """Which upstream began to answer a call, and how long that took."""

    upstream: str
    wait_ms: float
    endpoint: str | None = None  # the replica that answered, for a fleet
    body: bytes | None = None  # a whole answer's bytes as they came (unchanged passthrough)


class UpstreamStream:
    """The chunks of one call upstream; `answered` once the first chunk is in."""

    answered: Answered | None = None

    def __init__(self) -> None:
        self.chunks: AsyncIterator[Chunk]  # set by `UpstreamCaller.stream`

    def __aiter__(self) -> UpstreamStream:
        return self

    def __anext__(self) -> Awaitable[Chunk]:
        return self.chunks.__anext__()

    async def aclose(self) -> None:
        await self.chunks.aclose()  # type: ignore[attr-defined]


class UpstreamCaller:
    admission: Admission | None = None  # sheds requests that would wait too long upstream

    def __init__(self, upstreams: dict[str, Upstream], metrics: GatewayMetrics,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.upstreams = upstreams
        self.metrics = metrics
        # what metrics and Server-Timing are measured with; timeouts run on the loop's clock
        self.clock = clock
        self.prefill_tps: dict[str, float] = {}  # per upstream, measured from answers

    def answers_whole(self, ctx: RequestContext) -> bool:
        """Whether the route's upstreams (and fallback) answer `ctx.body` unstreamed."""
        return all(self.upstreams[name].answers_whole(ctx.body)
                   for name in _attempts(ctx.route, None))

    def stream(self, ctx: RequestContext, request: GenerationRequest, *,
               upstream: str | None = None) -> UpstreamStream:
        """`request` (the client's, or one made for it) upstream, streamed: the route's
        upstream and fallback, or only `upstream` when named."""
        out = UpstreamStream()
        out.chunks = self._stream(ctx, request, _attempts(ctx.route, upstream), out)
        return out

    async def collect(self, ctx: RequestContext, request: GenerationRequest, *,
                      upstream: str | None = None) -> tuple[str, str | None, Usage]:
        """(text, finish_reason, usage) of a whole answer asked for planning's sake."""
        parts, finish, usage = [], None, Usage()
        async for chunk in self.stream(ctx, request, upstream=upstream):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                delta = getattr(choice, "delta", None)  # a chat chunk's; a completion has text
                parts.append((choice.text if delta is None else delta.content) or "")
                finish = choice.finish_reason or finish
        return "".join(parts), finish, usage

    async def whole(self, ctx: RequestContext) -> tuple[WholeAnswer, Answered]:
        """The client's request upstream unstreamed (`answers_whole`): the whole answer."""
        route = ctx.route
        names = _attempts(route, None)
        loop = asyncio.get_running_loop()
        deadline = _deadline(route, loop)
        for attempt, name in enumerate(names):
            ends = loop.time() + route.timeout_s
            call = _call(ctx, ctx.body)
            t0 = self.clock()
            try:
                async with asyncio.timeout_at(ends if deadline is None else min(ends, deadline)):
                    asked = self.upstreams[name].answer(ctx.body, call)
                    if self.admission is not None:
                        asked = self.admission.whole(ctx, name, asked)
                    answer = await asked
            except (TimeoutError, APIError) as e:
                error = e if isinstance(e, APIError) else _timeout_error(name, route.timeout_s)()
                if self._falls_back(ctx, names, attempt, error, t0):
                    continue
                raise error from None
            except asyncio.CancelledError:
                self._upstream_time(ctx, name, "aborted", t0)
                raise
            answered = self._answered(ctx, name, attempt, call, t0)
            later(self._upstream_time, ctx, name, "ok", t0, self.clock())
            return answer, answered
        raise AssertionError("a route has at least one upstream")

    async def _stream(self, ctx: RequestContext, request: GenerationRequest, names: list[str],
                      out: UpstreamStream) -> AsyncIterator[Chunk]:
        route = ctx.route
        deadline = _deadline(route, asyncio.get_running_loop())
        for attempt, name in enumerate(names):
            call = _call(ctx, request)
            stream = self.upstreams[name].stream(request, call)
            if self.admission is not None:
                stream = self.admission.watch(ctx, name, stream)
            timer = UpstreamTimeout(route.timeout_s, deadline, _timeout_error(name, route.timeout_s))
            t0 = self.clock()
            try:
                first = await timer.next(stream)
                if first is None:
                    raise APIError(502, f"upstream '{name}': returned no answer")
            except APIError as e:
                timer.close()
                await stream.aclose()
                if self._falls_back(ctx, names, attempt, e, t0):
                    continue
                raise
            except BaseException:
                timer.close()
                raise
            out.answered = self._answered(ctx, name, attempt, call, t0)
            outcome, usage = "error", first.usage
            try:
                yield first
                while (chunk := await timer.next(stream)) is not None:
                    usage = chunk.usage or usage
                    yield chunk
                outcome = "ok"
            except (GeneratorExit, asyncio.CancelledError):
                outcome = "aborted"
                raise
            finally:
                timer.close()
                await stream.aclose()
                self._upstream_time(ctx, name, outcome, t0)
            self._learn_prefill(name, usage, out.answered.wait_ms / 1000)
            return

    def _falls_back(self, ctx: RequestContext, names: list[str], attempt: int, error: APIError,
                    t0: float) -> bool:
        """Record the failed attempt; True when it may be retried on the next upstream
        (a 5xx or a timeout, and a fallback left)."""
        self._upstream_time(ctx, names[attempt], "error", t0)
        if error.status >= 500 and attempt + 1 < len(names):
            log.warning("%s: %s; trying fallback %r", ctx.request_id, error.message,
                        names[attempt + 1])
            return True
        return False

    def _answered(self, ctx: RequestContext, name: str, attempt: int, call: UpstreamCall,
                  t0: float) -> Answered:
        """`name` began to answer (attempt 0: the route's own upstream)."""
        if attempt:
            self.metrics.fallbacks.labels(ctx.route.name, name).inc()
        return Answered(name, (self.clock() - t0) * 1000, call.endpoint, call.body)

    def _upstream_time(self, ctx: RequestContext, name: str, outcome: str, t0: float,
                       t1: float | None = None) -> None:
        """Observe the upstream's time, `t0` to `t1` (default: now)."""
        self.metrics.upstream_time.labels(ctx.route.name, name, outcome).observe(
            (self.clock() if t1 is None else t1) - t0)

    def _learn_prefill(self, name: str, usage: Usage | None, to_first_s: float) -> None:
        """The upstream's prefill rate (fresh prompt tokens a second to the first chunk),
        a moving average over answers with enough fresh tokens to say."""
        if usage is None or to_first_s <= 0:
            return
        fresh = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
        if fresh >= MIN_PREFILL_SAMPLE:
            seen = fresh / to_first_s
            old = self.prefill_tps.get(name)
            self.prefill_tps[name] = seen if old is None else 0.8 * old + 0.2 * seen


def _call(ctx: RequestContext, request: GenerationRequest) -> UpstreamCall:
    return UpstreamCall(ctx.request_id, ctx.session_id, ctx.cache_salt,
                        ctx.client_json if request is ctx.body else None, ctx.priority)


def _attempts(route: RouteConfig, upstream: str | None) -> list[str]:
    """The upstreams to try in turn: `upstream` alone when named, else the route's, then
    its fallback."""
    if upstream is not None:
        return [upstream]
    return [route.upstream] + ([route.fallback] if route.fallback else [])


def _deadline(route: RouteConfig, loop: asyncio.AbstractEventLoop) -> float | None:
    """When the whole answer must be in by (`total_timeout_s`), on the loop's clock."""
    return loop.time() + route.total_timeout_s if route.total_timeout_s else None


def _timeout_error(name: str, timeout_s: float) -> Callable[[], APIError]:
    def error() -> APIError:
        return APIError(504, f"upstream '{name}': no response within the route's timeout "
                        f"({timeout_s:g}s)", code="upstream_timeout")
    return error
