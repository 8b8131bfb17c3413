"""Pipeline stage: prompt transforms — windowing, compression, decomposition (in that order).

The adapter from a `RequestContext` to `prompts/`: it picks the route's token counter and
the embedder and token scorer `prompts/` takes as parameters, and returns a `TransformPlan`
that the pipeline carries out: the request to send upstream (a rewritten copy, never
`ctx.body`: the cache key was computed from it), or the parts of a decomposed request, each
answered on its own and merged in order (gateway/part_merge.py); and what was done (→
`x-headstart-transforms`). It sends nothing itself but what planning needs before the
request can be written, through the gateway's one upstream caller: a summary of dropped
turns, and the maps of a document too long for the context (map-reduce).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from engine import EngineModelScorer
from gateway.context import RequestContext
from gateway.upstream_call import UpstreamCaller
from openai_api import APIError, ChatCompletionRequest, ChatMessage, GenerationRequest, Usage
from prompts import decompose as dec
from prompts.compress import Compressor, CompressSettings, CostModel, SeenTexts
from prompts.interfaces import Message, TokenCounter
from prompts.summary_cache import SummaryCache
from prompts.tokens import counter_for
from prompts.window import ContextOverflow, WindowSettings, plan_window

if TYPE_CHECKING:
    from engine import AsyncEngine
    from gateway.config import GatewayConfig, RouteConfig

log = logging.getLogger("headstart.transforms")
DEFAULT_PREFILL_TPS = 100.0  # until measured: the bundled engine, 2k-token prompts, 2 busy cores
DEFAULT_CONTEXT = 8192


@dataclass
class TransformPlan:
    """What to send upstream for one request."""

    request: GenerationRequest  # the request to send (`ctx.body` when nothing changed)
    applied: list[str] = field(default_factory=list)  # e.g. ["window:dropped=4"]
    # a decomposed request: these parts, each answered through the caches, merged in order
    parts: list[ChatCompletionRequest] = field(default_factory=list)
    decomposition: dec.Decomposition | None = None
    # a text compressed here for the first time, to be read once verbatim in the background
    # after the answer starts, so the next asker finds it in the prefix cache
    prewarm: ChatCompletionRequest | None = None
    extra_usage: Usage | None = None  # what planning spent upstream (the maps), billed too


class TransformStage:
    def __init__(self, config: GatewayConfig, caller: UpstreamCaller,
                 engine: AsyncEngine | None = None) -> None:
        self.config = config
        self.caller = caller
        self.engine = engine
        self.summaries = SummaryCache()
        self.costs = CostModel()
        self.seen = SeenTexts()  # long texts already sent: kept verbatim for prefix reuse
        self._counters: dict[str, TokenCounter] = {}
        self._scorer: EngineModelScorer | None = None

    def active(self, ctx: RequestContext) -> bool:
        """Whether any transform may rewrite or split this request."""
        route = ctx.route
        return ctx.kind == "chat" and bool(route.window.max_input_tokens or route.compress.enabled
                                           or route.decompose.enabled)

    async def plan(self, ctx: RequestContext) -> TransformPlan:
        """The request to send for `ctx`, transformed as its route asks."""
        if not self.active(ctx):
            return TransformPlan(ctx.body)
        route, request = ctx.route, ctx.body
        assert isinstance(request, ChatCompletionRequest)
        plan = TransformPlan(request)
        original = [m.template_dict() for m in request.messages]
        messages = original
        counter = self.counter(route)
        if route.window.max_input_tokens:
            with ctx.timings.measure("window"):
                messages = await self._window(ctx, plan, messages, counter)
        verbatim = None  # set when compression rewrote a text it had not seen before
        if route.compress.enabled:
            with ctx.timings.measure("compress"):
                compressed = await self._compress(ctx, plan, messages, counter)
            if compressed is not messages:
                verbatim = _with_messages(request, messages)
            messages = compressed
        if messages is not original:
            plan.request = _with_messages(request, messages)
        if route.decompose.enabled and request.n == 1 and not (request.tools
                                                                or request.response_format):
            split = dec.split_turn(dec.last_user_text(messages), route.decompose.max_parts)
            if split is not None:
                plan.parts = [_with_messages(request, dec.sub_request_messages(messages, split, i))
                              for i in range(len(split.parts))]
                plan.decomposition = split
                plan.applied.append(f"decompose:{len(plan.parts)}")
                return plan
            limit = self._context_tokens(route)
            if route.decompose.map_reduce and counter.count_messages(messages) > limit:
                await self._map_reduce(ctx, plan, messages, limit, counter)
                return plan
        if verbatim is not None:
            plan.prewarm = verbatim.model_copy(update={
                "max_tokens": 1, "max_completion_tokens": None, "n": 1, "stream": False,
                "stream_options": None})
            plan.applied.append("compress:prewarm")
        return plan

    # ------------------------------------------------------------------ the stages

    async def _window(self, ctx: RequestContext, plan: TransformPlan, messages: list[Message],
                      counter: TokenCounter) -> list[Message]:
        policy = ctx.route.window
        summarize = policy.dropped == "summarize"
        settings = WindowSettings(policy.max_input_tokens, policy.low_water, policy.anchored,
                                  policy.summary_max_tokens + 16 if summarize else 0,
                                  policy.trim_middle)
        tools = ctx.body.tools or None
        try:
            window = plan_window(messages, counter, settings, tools)
        except ContextOverflow as e:
            raise APIError(413, f"context window exceeded: {e}", param="messages",
                           code="context_length_exceeded") from None
        if window.trimmed_tokens:
            plan.applied.append(f"window:trimmed={window.trimmed_tokens}")
        if not window.dropped:
            return messages if window.messages == messages else window.messages
        plan.applied.append(f"window:dropped={len(window.dropped)}")
        if not summarize:
            return window.messages
        try:
            text = await self.summaries.summary(window.dropped, Summarizer(ctx, self.caller),
                                                salt=ctx.route.name)
        except Exception as e:  # noqa: BLE001 - a failed summary degrades to dropping
            log.warning("%s: summary of dropped turns failed (%s); dropping them", ctx.request_id,
                        reason(e))
            plan.applied.append("window:summary-failed")
            return window.messages
        plan.applied.append("window:summary")
        return window.with_summary(text)

    async def _compress(self, ctx: RequestContext, plan: TransformPlan, messages: list[Message],
                        counter: TokenCounter) -> list[Message]:
        policy, route = ctx.route.compress, ctx.route
        rate = policy.prefill_tokens_per_s or self.caller.prefill_tps.get(route.upstream,
                                                                          DEFAULT_PREFILL_TPS)
        settings = CompressSettings(policy.min_tokens, policy.target_ratio,
                                    tuple(policy.methods), rate)
        embed = _shared_embed() if policy.embeddings and "select" in policy.methods else None
        scorer = await self.token_scorer() if "prune" in policy.methods else None
        out, report = await Compressor(counter, embed, scorer, self.costs, self.seen).compress(
            messages, settings)
        if report.applied:
            plan.applied.append(f"compress:{report.ratio:.2f}:{'+'.join(report.applied)}")
            return out
        return messages

    async def _map_reduce(self, ctx: RequestContext, plan: TransformPlan,
                          messages: list[Message], limit: int, counter: TokenCounter) -> None:
        """A document too long for the context: each chunk of it read with the question
        (the maps, asked now), then the final request over their answers (the reduce)."""
        policy, request = ctx.route.decompose, ctx.body
        system = [m for m in messages if m.get("role") == "system"][:1]
        document, question = dec.split_document(dec.last_user_text(messages))
        overhead = counter.count_messages(dec.map_messages(system, "", question, 0, 1))
        room = limit - overhead - policy.map_max_tokens - 64
        if room < 256 or not document:
            raise APIError(413, f"the request needs {counter.count_messages(messages)} tokens, "
                           f"more than the context of {limit}, and cannot be split",
                           param="messages", code="context_length_exceeded")
        chunks = dec.chunk_document(document, counter.count_text, room)
        plan.applied.append(f"map_reduce:{len(chunks)}")
        maps = [request.model_copy(update={
            "messages": [ChatMessage.model_validate(m) for m in
                         dec.map_messages(system, c, question, k, len(chunks))],
            "max_tokens": policy.map_max_tokens, "max_completion_tokens": None, "stream": True})
            for k, c in enumerate(chunks)]
        results = await asyncio.gather(*(self.caller.collect(ctx, r) for r in maps),
                                       return_exceptions=True)
        answers = [r[0] for r in results if not isinstance(r, BaseException)]
        if not answers:
            raise next(r for r in results if isinstance(r, BaseException))
        plan.extra_usage = sum((r[2] for r in results if not isinstance(r, BaseException)),
                               Usage())
        plan.request = _with_messages(request, dec.reduce_messages(system, question, answers))

    # ------------------------------------------------------------------ helpers

    def counter(self, route: RouteConfig) -> TokenCounter:
        """The token counter of the route's upstream (engine tokenizer, tiktoken, litellm)."""
        if route.upstream not in self._counters:
            up = self.config.upstreams[route.upstream]
            tokenizer = self.engine.tokenizer if self.engine is not None else None
            model = up.model or route.name
            self._counters[route.upstream] = counter_for(up.kind, model, tokenizer)
        return self._counters[route.upstream]

    def _context_tokens(self, route: RouteConfig) -> int:
        if route.decompose.context_tokens:
            return route.decompose.context_tokens
        if self.config.upstreams[route.upstream].kind == "engine" and self.engine is not None:
            return self.engine.max_model_len
        return DEFAULT_CONTEXT

    async def token_scorer(self) -> EngineModelScorer:
        """The pruning scorer, loaded on first use on a worker thread (seconds)."""
        if self._scorer is None:
            up = self.config.engine_upstream()
            # on a CPU it scores between the engine's steps (see app.share_step_thread)
            shared = self.engine is not None and self.engine.on_cpu
            executor = self.engine.executor if shared else None
            loop = asyncio.get_running_loop()  # loaded where it will score
            self._scorer = await loop.run_in_executor(
                executor, partial(EngineModelScorer, up.path if up else None,
                                  executor=executor))
        return self._scorer


class Summarizer:
    """A `prompts` summariser that asks upstream for a short summary: the route's
    `window.summarizer` upstream when it names one, else the route's own (with its
    fallback), through the one upstream caller."""

    def __init__(self, ctx: RequestContext, caller: UpstreamCaller) -> None:
        self.ctx, self.caller = ctx, caller

    async def summarize(self, text: str) -> str:
        policy, route = self.ctx.route.window, self.ctx.route
        request = ChatCompletionRequest(model=self.ctx.body.model, stream=True,
                                        max_tokens=policy.summary_max_tokens, temperature=0.0,
                                        messages=[ChatMessage(role="user", content=text)])
        named = policy.summarizer
        other = named if named and named != route.upstream and named in self.caller.upstreams \
            else None
        answer, _, _ = await self.caller.collect(self.ctx, request, upstream=other)
        return answer


def _with_messages(request: ChatCompletionRequest, messages: list[Message]) -> ChatCompletionRequest:
    return request.model_copy(update={"messages": [ChatMessage.model_validate(m)
                                                   for m in messages]})


def reason(error: BaseException | None) -> str:
    """An error as a short phrase for logs and merged answers."""
    return getattr(error, "message", None) or str(error) or type(error).__name__


def _shared_embed():  # noqa: ANN202 - the shared embedder's `embed`, or None without it
    try:
        from cache.embedder import Embedder
    except ImportError:
        return None
    return Embedder.shared().embed
