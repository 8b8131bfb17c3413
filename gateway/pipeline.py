"""One request's path through the gateway, each stage entered once and returning a typed
result: cache lookup (`CacheLookup`) → prompt transforms (`TransformPlan`) → upstream
(`UpstreamStream`, through the one upstream caller: fallback, timeouts, admission) → store.
See docs/internals.md, "Gateway".

`Pipeline.run(ctx)` yields OpenAI chunks whatever the client asked for; the HTTP layer
streams them (SSE, WebSocket) or folds them into one response, and renders `ctx.report`
(what the stages found, recorded here) as headers. A cached answer is replayed as chunks.
Only a completed, cacheable answer is stored: never an error, an aborted stream (client
gone, timeout), a `finish_reason: length` answer, a merge with a failed part, nor when the
client said `no-store`.

A non-streamed request whose route needs no chunks (no cache, no prompt transforms) and
whose upstream answers unstreamed skips them: `answer_whole(ctx)`, through the same caller;
the client then gets the upstream's own bytes when they need no change. Metrics are
recorded `later`, once the answer or its first frame is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace

from gateway.cache_stage import CacheStage
from gateway.context import Answer, Report, RequestContext, ServerTiming
from gateway.metrics import GatewayMetrics, later
from gateway.part_merge import PartMerge
from gateway.replay import replay
from gateway.sse import drop_wire
from gateway.transform_stage import TransformPlan, TransformStage, reason
from gateway.upstream_call import UpstreamCaller, UpstreamStream
from openai_api import APIError, ChatCompletionRequest, Chunk, Usage, WholeAnswer
from openai_api.assemble import Assembler

log = logging.getLogger("headstart.gateway")


class Pipeline:
    def __init__(self, cache: CacheStage, transforms: TransformStage, caller: UpstreamCaller,
                 metrics: GatewayMetrics, clock: Callable[[], float] = time.perf_counter) -> None:
        self.cache = cache
        self.transforms = transforms
        self.caller = caller
        self.metrics = metrics
        # what metrics and Server-Timing are measured with (the clock `ctx.started` is read
        # from); timeouts run on the event loop's own clock
        self.clock = clock
        self._background: set[asyncio.Task] = set()  # prewarm reads in flight

    async def run(self, ctx: RequestContext, *, split: bool = True,
                  assembler: Assembler | None = None) -> AsyncIterator[Chunk]:
        """All chunks of the answer to `ctx.body`, each labelled with the client's model.
        `split=False`: the consumer folds the chunks into one answer, so a cached answer
        is replayed in one piece. `assembler`: the consumer's own, which the pipeline then
        fills (a non-streaming answer is folded once, not twice)."""
        assembler = assembler or Assembler(ctx.kind, ctx.body.model)
        outcome, first = "error", True
        try:
            async with aclosing(self._stages(ctx, split)) as chunks:
                async for chunk in chunks:
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
        report = ctx.report
        if report.cache.answer is None and not report.parts_failed \
                and ctx.route.caching_enabled():
            await self._store(ctx, assembler)  # 4. the store

    async def _stages(self, ctx: RequestContext, split: bool) -> AsyncIterator[Chunk]:
        report, model = ctx.report, ctx.body.model
        # 1. the caches
        if ctx.route.caching_enabled():
            t0 = time.perf_counter()
            report.cache = await self.cache.lookup(ctx)
            if report.cache.status != "bypass":
                ctx.timings.add("cache", (time.perf_counter() - t0) * 1000)
        else:
            report.cache = replace(report.cache, status="bypass")
        later(self._count_cache, ctx)
        if report.cache.answer is not None:
            async with aclosing(replay(report.cache.answer, model, split)) as hit:
                async for chunk in hit:
                    yield chunk
            return
        # 2. the prompt transforms
        plan = await self.transforms.plan(ctx)
        report.transforms += plan.applied
        # 3. upstream: the request, or its parts merged in order
        if plan.parts:
            merge = PartMerge(plan, [self._part(ctx, part) for part in plan.parts], model)
            async with aclosing(aiter(merge)) as merged:
                async for chunk in merged:
                    yield chunk
            if merge.failed:
                report.parts_failed = merge.failed
                report.transforms.append(f"decompose:failed={merge.failed}")
            return
        async with aclosing(self._answer(ctx, plan, self.caller.stream(ctx, plan.request))) \
                as chunks:
            async for chunk in chunks:
                yield chunk

    async def _answer(self, ctx: RequestContext, plan: TransformPlan,
                      source: UpstreamStream) -> AsyncIterator[Chunk]:
        """The upstream's chunks, labelled with the client's model; who answered goes in the
        report, the plan's prewarm read starts after the first chunk, the usage of what
        planning asked upstream is added to the answer's."""
        report, model = ctx.report, ctx.body.model
        # straight from the upstream's reader: a chunk keeps the JSON it came as unless it is
        # relabelled here (caches and transforms make or change chunks, so they drop it)
        straight = not ctx.route.caching_enabled() and not self.transforms.active(ctx)
        first = True
        async with aclosing(source):
            async for chunk in source:
                if first:
                    first = False
                    answered = source.answered
                    if answered is not None:
                        report.upstream, report.endpoint = answered.upstream, answered.endpoint
                        ctx.timings.add("upstream", answered.wait_ms)
                    if plan.prewarm is not None:
                        self._prewarm(ctx, plan.prewarm)
                if chunk.model != model or not straight:
                    chunk.model = model
                    drop_wire(chunk)
                if chunk.usage is not None and plan.extra_usage is not None:
                    chunk.usage = chunk.usage + plan.extra_usage
                yield chunk

    def answers_whole(self, ctx: RequestContext) -> bool:
        """Whether `answer_whole(ctx)` serves this request: not streamed, no cache and no
        prompt transforms on its route, and its upstream (and fallback) answer unstreamed."""
        if ctx.body.stream or ctx.route.caching_enabled() or self.transforms.active(ctx):
            return False
        return self.caller.answers_whole(ctx)

    async def answer_whole(self, ctx: RequestContext) -> WholeAnswer:
        """The whole answer, labelled with the client's model, without a chunk in between."""
        report = ctx.report
        report.cache = replace(report.cache, status="bypass")
        later(self._count_cache, ctx)
        outcome, usage = "error", None
        try:
            answer, answered = await self.caller.whole(ctx)
            report.upstream, report.endpoint = answered.upstream, answered.endpoint
            report.upstream_body = answered.body
            ctx.timings.add("upstream", answered.wait_ms)
            if not answer.choices or any(c.finish_reason is None for c in answer.choices):
                raise unfinished(ctx)
            if answer.model != ctx.body.model or answer.usage is None:
                report.upstream_body = None  # relabelled below: the bytes no longer match
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

    async def _part(self, ctx: RequestContext, request: ChatCompletionRequest
                    ) -> AsyncIterator[Chunk]:
        """One part of a decomposed request, looked up and stored like a request of its own
        when the route caches, so a part answered before, alone or inside another request,
        is not asked again."""
        if not ctx.route.caching_enabled():
            async with aclosing(self.caller.stream(ctx, request)) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        sub = replace(ctx, request_id=f"{ctx.request_id}.{uuid.uuid4().hex[:6]}", body=request,
                      client_json=None, timings=ServerTiming(), report=Report(),
                      cache_control=replace(ctx.cache_control))
        lookup = await self.cache.lookup(sub)
        if lookup.answer is not None:
            ctx.report.transforms.append(f"part-cache:{lookup.status}")
            async for chunk in replay(lookup.answer, request.model):
                yield chunk
            return
        assembler = Assembler(sub.kind, request.model)
        async with aclosing(self.caller.stream(sub, request)) as chunks:
            async for chunk in chunks:
                assembler.add(chunk)
                yield chunk
        await self._store(sub, assembler)

    def _prewarm(self, ctx: RequestContext, warm: ChatCompletionRequest) -> None:
        """Read a text compressed here for the first time once more, verbatim, in the
        background (a one-token answer, discarded): asked about again it goes upstream
        verbatim, and the next asker then finds it in the prefix cache instead of paying a
        cold prefill of the whole text."""
        async def read_once() -> None:
            try:
                await self.caller.collect(ctx, warm)
            except Exception as e:  # noqa: BLE001 - best effort: a cold prefill later instead
                log.info("%s: prewarm failed (%s)", ctx.request_id, reason(e))

        task = asyncio.get_running_loop().create_task(read_once())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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

    def _count_cache(self, ctx: RequestContext) -> None:
        self.metrics.cache.labels(ctx.route.name, ctx.report.cache.status).inc()

    def _first_token(self, ctx: RequestContext, at: float) -> None:
        self.metrics.ttft.labels(ctx.route.name, ctx.report.cache.status).observe(
            at - ctx.started)

    def _account(self, ctx: RequestContext, outcome: str, usage: Usage | None) -> None:
        ctx.report.usage = usage
        route = ctx.route.name
        self.metrics.requests.labels(route, outcome).inc()
        self.metrics.latency.labels(route, outcome).observe(self.clock() - ctx.started)
        if outcome == "ok" and usage is not None \
                and ctx.report.cache.status not in ("exact", "semantic"):
            self.metrics.prompt_tokens.labels(route).inc(usage.prompt_tokens)
            self.metrics.cached_tokens.labels(route).inc(usage.prompt_tokens_details.cached_tokens)


def unfinished(ctx: RequestContext) -> APIError:
    """The 502 for an upstream answer that ended without a finish reason."""
    return APIError(502, f"upstream '{ctx.report.upstream}': the answer ended without a "
                    "finish reason", code="upstream_error")
