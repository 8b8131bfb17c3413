"""One request's path through the gateway: cache lookup → prompt transforms → upstream
(with timeout and fallback) → store. See docs/internals.md, "Gateway".

`Pipeline.run(ctx)` yields OpenAI chunks whatever the client asked for; the HTTP layer
streams them (SSE, WebSocket) or folds them into one response. A cached answer is replayed
as chunks. Only a completed, cacheable answer is stored: never an error, an aborted stream
(client gone, timeout) or a `finish_reason: length` answer, nor when the client said
`no-store`.

A non-streamed request whose route needs no chunks (no cache, no prompt transforms) and
whose upstream answers unstreamed skips them: `answer_whole(ctx)`, with the same fallback,
timeouts and metrics; the client then gets the upstream's own bytes when they need no change.
Metrics are recorded `later`, once the answer or its first frame is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from gateway.admission import Admission
from gateway.cache_stage import CacheStage
from gateway.config import RouteConfig
from gateway.context import Answer, RequestContext, ServerTiming
from gateway.metrics import GatewayMetrics
from gateway.replay import replay
from gateway.sse import drop_wire
from gateway.transform_stage import TransformStage
from gateway.upstream_timeout import UpstreamTimeout
from gateway.upstreams import Upstream
from openai_api import APIError, ChatCompletion, ChatCompletionChunk, Completion, Usage
from openai_api.assemble import Assembler

log = logging.getLogger("headstart.gateway")

Chunk = ChatCompletionChunk | Completion


class Pipeline:
    """The request path above; also the transform stage's way upstream (`forward`,
    `forward_part`: its `Forwarder`)."""

    admission: Admission | None = None  # sheds requests that would wait too long upstream

    def __init__(self, upstreams: dict[str, Upstream], cache: CacheStage,
                 transforms: TransformStage, metrics: GatewayMetrics,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.upstreams = upstreams
        self.cache = cache
        self.transforms = transforms
        self.metrics = metrics
        # what metrics and Server-Timing are measured with (the clock `ctx.started` is read
        # from); timeouts run on the event loop's own clock
        self.clock = clock

    async def run(self, ctx: RequestContext, *, split: bool = True,
                  assembler: Assembler | None = None) -> AsyncIterator[Chunk]:
        """All chunks of the answer to `ctx.body`, each labelled with the client's model.
        `split=False`: the consumer folds the chunks into one answer, so a cached answer
        is replayed in one piece. `assembler`: the consumer's own, which the pipeline then
        fills (a non-streaming answer is folded once, not twice)."""
        model = ctx.body.model
        if assembler is None:
            assembler = Assembler(ctx.kind, model)
        # straight from the upstream's reader: a chunk keeps the JSON it came as unless it is
        # relabelled here (caches and transforms make or change chunks, so they drop it)
        straight = self.passes_through(ctx)
        outcome, first = "error", True
        try:
            source = await self._source(ctx, split)
            async with aclosing(source):
                async for chunk in source:
                    if chunk.model != model or not straight:
                        chunk.model = model
                        drop_wire(chunk)
                    assembler.add(chunk)
                    if first:
                        first = False
                        later(self._first_token, ctx, self.clock())
                    yield chunk
            outcome = "ok"
        except (GeneratorExit, asyncio.CancelledError):
            outcome = "aborted"
            raise
        finally:
            self._account(ctx, outcome, assembler.usage)
        if ctx.cache_status in ("exact", "semantic") or not ctx.route.caching_enabled():
            return
        await self._store(ctx, assembler)

    def passes_through(self, ctx: RequestContext) -> bool:
        """No cache and no prompt transforms on the request's route: its chunks come
        straight from the upstream."""
        return not ctx.route.caching_enabled() and not self.transforms.active(ctx)

    def answers_whole(self, ctx: RequestContext) -> bool:
        """Whether `answer_whole(ctx)` serves this request: not streamed, no cache and no
        prompt transforms on its route, and its upstream (and fallback) answer unstreamed."""
        if ctx.body.stream or not self.passes_through(ctx):
            return False
        return all(self.upstreams[name].answers_whole(ctx.body) for name in _attempts(ctx.route))

    async def answer_whole(self, ctx: RequestContext) -> ChatCompletion | Completion:
        """The whole answer, labelled with the client's model, without a chunk in between."""
        ctx.cache_status = "bypass"
        later(self._count_cache, ctx)
        outcome, usage = "error", None
        try:
            answer = await self._ask_whole(ctx)
            if not answer.choices or any(c.finish_reason is None for c in answer.choices):
                raise unfinished(ctx)
            if answer.model != ctx.body.model or answer.usage is None:
                ctx.upstream_body = None  # relabelled below: the bytes no longer match
                answer.model = ctx.body.model
                answer.usage = answer.usage or Usage()
            usage = answer.usage
            later(self._first_token, ctx, self.clock())
            outcome = "ok"
            return answer
        except asyncio.CancelledError:
            outcome = "aborted"
            raise
        finally:
            later(self._account, ctx, outcome, usage)

    async def _ask_whole(self, ctx: RequestContext) -> ChatCompletion | Completion:
        """`forward` for a whole answer: the route's upstream, then its fallback if the first
        fails (5xx or timeout); `timeout_s` bounds the wait for the answer."""
        route = ctx.route
        names = _attempts(route)
        loop = asyncio.get_running_loop()
        deadline = _deadline(route, loop)
        for attempt, name in enumerate(names):
            ends = loop.time() + route.timeout_s
            t0 = self.clock()
            try:
                async with asyncio.timeout_at(ends if deadline is None else min(ends, deadline)):
                    asked = self.upstreams[name].answer(ctx.body, ctx)
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
            self._answered(ctx, name, attempt, t0)
            later(self._upstream_time, ctx, name, "ok", t0, self.clock())
            return answer
        raise AssertionError("a route has at least one upstream")

    async def _source(self, ctx: RequestContext, split: bool) -> AsyncIterator[Chunk]:
        """The cached answer replayed, or the transformed request sent upstream."""
        answer = None
        if ctx.route.caching_enabled():
            answer = await self.cache.lookup(ctx)
        else:
            ctx.cache_status = "bypass"
        later(self._count_cache, ctx)
        if answer is not None:
            return replay(answer, ctx.body.model, split)
        return self.transforms.run(ctx, self)

    def forward_part(self, ctx: RequestContext, request: Any) -> AsyncIterator[Chunk]:
        """One part of a decomposed request (`transform_stage.Forwarder`): through the caches
        when the route caches, else straight upstream."""
        if ctx.route.caching_enabled():
            return self._through_cache(ctx, request)
        return self.forward(ctx, request)

    async def _through_cache(self, ctx: RequestContext, request: Any) -> AsyncIterator[Chunk]:
        """A sub-request (a decomposed part) looked up and stored like a request of its own,
        so a part answered before, alone or inside another request, is not asked again."""
        sub = replace(ctx, request_id=f"{ctx.request_id}.{uuid.uuid4().hex[:6]}", body=request,
                      client_json=None, timings=ServerTiming(), transforms=[], cache_status="miss",
                      cache_similarity=None, cache_control=replace(ctx.cache_control))
        answer = await self.cache.lookup(sub)
        if answer is not None:
            ctx.transforms.append(f"part-cache:{sub.cache_status}")
            async for chunk in replay(answer, request.model):
                yield chunk
            return
        assembler = Assembler(sub.kind, request.model)
        async for chunk in self.forward(sub, request):
            assembler.add(chunk)
            yield chunk
        await self._store(sub, assembler)

    async def _store(self, ctx: RequestContext, assembler: Assembler) -> None:
        """Store the assembled answer unless it must not be kept; a cache failure never
        fails a request."""
        answer = Answer.folded(assembler)
        if answer is None or not answer.cacheable() or ctx.cache_control.no_store:
            return
        try:
            await self.cache.store(ctx, answer)
        except Exception:  # noqa: BLE001
            log.exception("cache store failed for %s", ctx.request_id)

    async def forward(self, ctx: RequestContext, request: Any) -> AsyncIterator[Chunk]:
        """One (sub-)request upstream: the route's upstream, then its fallback if the first
        fails (5xx or timeout) before any chunk came back."""
        route = ctx.route
        names = _attempts(route)
        loop = asyncio.get_running_loop()
        deadline = _deadline(route, loop)
        for attempt, name in enumerate(names):
            stream = self.upstreams[name].stream(request, ctx)
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
            self._answered(ctx, name, attempt, t0)
            outcome = "error"
            try:
                yield first
                while (chunk := await timer.next(stream)) is not None:
                    yield chunk
                outcome = "ok"
            except (GeneratorExit, asyncio.CancelledError):
                outcome = "aborted"
                raise
            finally:
                timer.close()
                await stream.aclose()
                self._upstream_time(ctx, name, outcome, t0)
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

    def _answered(self, ctx: RequestContext, name: str, attempt: int, t0: float) -> None:
        """Record that `name` began to answer (attempt 0: the route's own upstream)."""
        ctx.upstream_name = name
        ctx.timings.add("upstream", (self.clock() - t0) * 1000)
        if attempt:
            self.metrics.fallbacks.labels(ctx.route.name, name).inc()

    def _count_cache(self, ctx: RequestContext) -> None:
        self.metrics.cache.labels(ctx.route.name, ctx.cache_status).inc()

    def _first_token(self, ctx: RequestContext, at: float) -> None:
        self.metrics.ttft.labels(ctx.route.name, ctx.cache_status).observe(at - ctx.started)

    def _upstream_time(self, ctx: RequestContext, name: str, outcome: str, t0: float,
                       t1: float | None = None) -> None:
        """Observe the upstream's time, `t0` to `t1` (default: now)."""
        self.metrics.upstream_time.labels(ctx.route.name, name, outcome).observe(
            (self.clock() if t1 is None else t1) - t0)

    def _account(self, ctx: RequestContext, outcome: str, usage: Usage | None) -> None:
        ctx.usage = usage
        route = ctx.route.name
        self.metrics.requests.labels(route, outcome).inc()
        self.metrics.latency.labels(route, outcome).observe(self.clock() - ctx.started)
        if outcome == "ok" and usage is not None and ctx.cache_status not in ("exact", "semantic"):
            self.metrics.prompt_tokens.labels(route).inc(usage.prompt_tokens)
            self.metrics.cached_tokens.labels(route).inc(usage.prompt_tokens_details.cached_tokens)


def later(record: Callable[..., object], *args: Any) -> None:
    """Run `record(*args)` once the current step of the request's task is done: after the
    answer (or its first frame) is written. After the gateway idles on the upstream, every
    line of Python runs from cold caches, and bookkeeping done before the write would add
    to the client's latency."""
    asyncio.get_running_loop().call_soon(record, *args)


def unfinished(ctx: RequestContext) -> APIError:
    """The 502 for an upstream answer that ended without a finish reason."""
    return APIError(502, f"upstream '{ctx.upstream_name}': the answer ended without a finish "
                    "reason", code="upstream_error")


def _attempts(route: RouteConfig) -> list[str]:
    """The upstreams to try in turn: the route's, then its fallback."""
    return [route.upstream] + ([route.fallback] if route.fallback else [])


def _deadline(route: RouteConfig, loop: asyncio.AbstractEventLoop) -> float | None:
    """When the whole answer must be in by (`total_timeout_s`), on the loop's clock."""
    return loop.time() + route.total_timeout_s if route.total_timeout_s else None


def _timeout_error(name: str, timeout_s: float) -> Callable[[], APIError]:
    def error() -> APIError:
        return APIError(504, f"upstream '{name}': no response within the route's timeout "
                        f"({timeout_s:g}s)", code="upstream_timeout")
    return error
