"""Pipeline stage: prompt transforms — windowing, compression, decomposition (in that order).

The adapter from a `RequestContext` to `prompts/`: it picks the route's token counter, builds
the summariser, the embedder and the token scorer `prompts/` takes as parameters, rewrites a
copy of the request (never `ctx.body`: the cache key was computed from it) and sends it
through a `Forwarder` (the pipeline: the route's upstream, fallback and timeouts). Decomposed
requests fan out into concurrent sub-requests whose answers are merged
in order. What was done goes to `ctx.transforms` (→ `x-headstart-transforms`).

Failures of sub-requests: a failed part reads `[part N failed: ...]` in the merged answer,
which is then not cached; if every part fails, the request fails with the first error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from engine import EngineModelScorer
from gateway.context import RequestContext
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChunkChoice,
    Completion,
    CompletionRequest,
    DeltaMessage,
    Usage,
    new_id,
)
from prompts import decompose as dec
from prompts.compress import Compressor, CompressSettings, CostModel, SeenTexts
from prompts.interfaces import Message, TokenCounter
from prompts.ordered_merge import PartFailed, merge_in_order
from prompts.summary_cache import SummaryCache
from prompts.tokens import counter_for
from prompts.window import ContextOverflow, WindowSettings, plan_window

if TYPE_CHECKING:
    from gateway.config import GatewayConfig, RouteConfig


class Forwarder(Protocol):
    """How the stage sends requests upstream (`Pipeline` is one): with the route's fallback
    and timeouts, for the request `ctx` stands for."""

    def forward(self, ctx: RequestContext, request: ChatCompletionRequest | CompletionRequest
                ) -> AsyncIterator[ChatCompletionChunk | Completion]:
        """One request (the client's, or a rewritten copy) upstream."""
        ...

    def forward_part(self, ctx: RequestContext, request: ChatCompletionRequest
                     ) -> AsyncIterator[ChatCompletionChunk]:
        """One part of a decomposed request: looked up and stored in the route's caches
        like a request of its own, so a part answered before is not asked again."""
        ...


# one chat request upstream (`Forwarder.forward` for one request's context)
Send = Callable[[ChatCompletionRequest], AsyncIterator[Any]]
log = logging.getLogger("headstart.transforms")
DEFAULT_PREFILL_TPS = 100.0  # until measured: the bundled engine, 2k-token prompts, 2 busy cores
DEFAULT_CONTEXT = 8192


class ForwardSummarizer:
    """A `Summarizer` that asks an upstream (through `send`) for a short summary."""

    def __init__(self, send: Send, model: str, max_tokens: int) -> None:
        self.send, self.model, self.max_tokens = send, model, max_tokens

    async def summarize(self, text: str) -> str:
        request = ChatCompletionRequest(model=self.model, max_tokens=self.max_tokens,
                                        temperature=0.0, stream=True,
                                        messages=[ChatMessage(role="user", content=text)])
        text, _, _ = await collect(self.send(request))
        return text


async def collect(chunks: AsyncIterator[Any]) -> tuple[str, str | None, Usage]:
    """(text, finish_reason, usage) of a whole chunk stream."""
    parts, finish, usage = [], None, Usage()
    async for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish, usage


class TransformStage:
    def __init__(self, config: GatewayConfig, engine: Any = None) -> None:
        self.config = config
        self.engine = engine
        self.summaries = SummaryCache()
        self.costs = CostModel()
        self.seen = SeenTexts()  # long texts already sent: kept verbatim for prefix reuse
        self.prefill_tps: dict[str, float] = {}  # per upstream, measured from forwards
        self._counters: dict[str, TokenCounter] = {}
        self._upstreams: dict[str, Any] = {}  # summariser upstreams other than the route's
        self._scorer: EngineModelScorer | None = None
        self._background: set[asyncio.Task] = set()  # prewarm reads in flight

    def active(self, ctx: RequestContext) -> bool:
        """Whether any transform may rewrite or split this request."""
        route = ctx.route
        return ctx.kind == "chat" and bool(route.window.max_input_tokens or route.compress.enabled
                                           or route.decompose.enabled)

    def run(self, ctx: RequestContext, forwarder: Forwarder) -> AsyncIterator[Any]:
        """Chunks for the whole request, sent upstream through `forwarder`."""
        if not self.active(ctx):
            return forwarder.forward(ctx, ctx.body)
        return self._transformed(ctx, forwarder)

    # ------------------------------------------------------------------ the stages

    async def _transformed(self, ctx: RequestContext, forwarder: Forwarder
                           ) -> AsyncIterator[Any]:
        route, request = ctx.route, ctx.body
        assert isinstance(request, ChatCompletionRequest)
        original = [m.template_dict() for m in request.messages]
        messages = original
        counter = self.counter(route)
        if route.window.max_input_tokens:
            with ctx.timings.measure("window"):
                messages = await self._window(ctx, messages, counter, forwarder)
        verbatim = None  # set when compression rewrote a text it had not seen before
        if route.compress.enabled:
            with ctx.timings.measure("compress"):
                compressed = await self._compress(ctx, messages, counter)
            if compressed is not messages:
                verbatim = _with_messages(request, messages)
            messages = compressed
        rewritten = request if messages is original else _with_messages(request, messages)
        if route.decompose.enabled and request.n == 1 and not (request.tools
                                                                or request.response_format):
            plan = dec.split_turn(dec.last_user_text(messages), route.decompose.max_parts)
            if plan is not None:
                async for chunk in self._decomposed(ctx, rewritten, messages, plan, forwarder):
                    yield chunk
                return
            limit = self._context_tokens(route)
            if route.decompose.map_reduce and counter.count_messages(messages) > limit:
                async for chunk in self._map_reduce(ctx, rewritten, messages, limit, forwarder,
                                                    counter):
                    yield chunk
                return
        async for chunk in self._measured(route.upstream, forwarder.forward(ctx, rewritten)):
            if verbatim is not None:  # after the first chunk: never before the answer's prefill
                self._prewarm(ctx, verbatim, forwarder)
                verbatim = None
            yield chunk

    async def _window(self, ctx: RequestContext, messages: list[Message],
                      counter: TokenCounter, forwarder: Forwarder) -> list[Message]:
        policy = ctx.route.window
        summarize = policy.dropped == "summarize"
        settings = WindowSettings(policy.max_input_tokens, policy.low_water, policy.anchored,
                                  policy.summary_max_tokens + 16 if summarize else 0,
                                  policy.trim_middle)
        tools = ctx.body.tools or None
        try:
            plan = plan_window(messages, counter, settings, tools)
        except ContextOverflow as e:
            raise APIError(413, f"context window exceeded: {e}", param="messages",
                           code="context_length_exceeded") from None
        if plan.trimmed_tokens:
            ctx.transforms.append(f"window:trimmed={plan.trimmed_tokens}")
        if not plan.dropped:
            return messages if plan.messages == messages else plan.messages
        ctx.transforms.append(f"window:dropped={len(plan.dropped)}")
        if not summarize:
            return plan.messages
        summarizer = ForwardSummarizer(self._summary_sender(ctx, forwarder), ctx.body.model,
                                       policy.summary_max_tokens)
        try:
            text = await self.summaries.summary(plan.dropped, summarizer, salt=ctx.route.name)
        except Exception as e:  # noqa: BLE001 - a failed summary degrades to dropping
            log.warning("%s: summary of dropped turns failed (%s); dropping them", ctx.request_id,
                        _reason(e))
            ctx.transforms.append("window:summary-failed")
            return plan.messages
        ctx.transforms.append("window:summary")
        return plan.with_summary(text)

    async def _compress(self, ctx: RequestContext, messages: list[Message],
                        counter: TokenCounter) -> list[Message]:
        policy, route = ctx.route.compress, ctx.route
        rate = policy.prefill_tokens_per_s or self.prefill_tps.get(route.upstream,
                                                                   DEFAULT_PREFILL_TPS)
        settings = CompressSettings(policy.min_tokens, policy.target_ratio,
                                    tuple(policy.methods), rate)
        embed = _shared_embed() if policy.embeddings and "select" in policy.methods else None
        scorer = await self.token_scorer() if "prune" in policy.methods else None
        out, report = await Compressor(counter, embed, scorer, self.costs, self.seen).compress(
            messages, settings)
        if report.applied:
            ctx.transforms.append(f"compress:{report.ratio:.2f}:{'+'.join(report.applied)}")
            return out
        return messages

    def _prewarm(self, ctx: RequestContext, verbatim: ChatCompletionRequest,
                 forwarder: Forwarder) -> None:
        """What was compressed here was new (`SeenTexts` skips repeats): asked about again, it
        goes upstream verbatim, to be read from the prefix cache. Read it once now, in the
        background (one-token answer, discarded), so the second asker finds it there too
        instead of paying a cold prefill of the whole text."""
        warm = verbatim.model_copy(update={"max_tokens": 1, "max_completion_tokens": None,
                                           "n": 1, "stream": False, "stream_options": None})

        async def read_once() -> None:
            try:
                async for _ in forwarder.forward(ctx, warm):
                    pass
            except Exception as e:  # noqa: BLE001 - best effort: a cold prefill later instead
                log.info("%s: prewarm failed (%s)", ctx.request_id, _reason(e))

        task = asyncio.get_running_loop().create_task(read_once())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        ctx.transforms.append("compress:prewarm")

    async def _decomposed(self, ctx: RequestContext, request: ChatCompletionRequest,
                          messages: list[Message], plan: dec.Decomposition,
                          forwarder: Forwarder) -> AsyncIterator[Any]:
        subs = [_with_messages(request, dec.sub_request_messages(messages, plan, i))
                for i in range(len(plan.parts))]
        ctx.transforms.append(f"decompose:{len(subs)}")
        cid, usage, finish = new_id("chatcmpl"), Usage(), "stop"
        pending: list[str] = []  # failed leading parts, held until any part succeeds
        first_error: BaseException | None = None
        started, failed, current = False, 0, -1
        async for item in merge_in_order([forwarder.forward_part(ctx, r) for r in subs]):
            if item.index != current:
                current = item.index
                pending.append(("\n\n" if current else "") + dec.part_heading(plan, current))
            if isinstance(item, PartFailed):
                failed += 1
                first_error = first_error or item.error
                pending.append(f"[part {item.index + 1} failed: {_reason(item.error)}]")
                continue
            chunk = item.item
            usage = usage + chunk.usage if chunk.usage else usage
            text = "".join(c.delta.content or "" for c in chunk.choices)
            ended = [c.finish_reason for c in chunk.choices if c.finish_reason]
            finish = "length" if "length" in ended else finish
            if not text and not ended:
                continue  # role and usage chunks: the merged answer has its own
            if not started:
                started = True
                yield _chunk(cid, request.model, DeltaMessage(role="assistant", content=""))
            if pending or text:
                yield _chunk(cid, request.model, DeltaMessage(content="".join(pending) + text))
                pending = []
        if not started:
            raise first_error if isinstance(first_error, APIError) else APIError(
                502, f"every part of the decomposed request failed: {_reason(first_error)}")
        if pending:
            yield _chunk(cid, request.model, DeltaMessage(content="".join(pending)))
        if failed:
            ctx.transforms.append(f"decompose:failed={failed}")
            ctx.cache_control.no_store = True
        yield _chunk(cid, request.model, DeltaMessage(), finish)
        yield ChatCompletionChunk(id=cid, model=request.model, choices=[], usage=usage)

    async def _map_reduce(self, ctx: RequestContext, request: ChatCompletionRequest,
                          messages: list[Message], limit: int, forwarder: Forwarder,
                          counter: TokenCounter) -> AsyncIterator[Any]:
        policy = ctx.route.decompose
        system = [m for m in messages if m.get("role") == "system"][:1]
        document, question = dec.split_document(dec.last_user_text(messages))
        overhead = counter.count_messages(dec.map_messages(system, "", question, 0, 1))
        room = limit - overhead - policy.map_max_tokens - 64
        if room < 256 or not document:
            raise APIError(413, f"the request needs {counter.count_messages(messages)} tokens, "
                           f"more than the context of {limit}, and cannot be split",
                           param="messages", code="context_length_exceeded")
        chunks = dec.chunk_document(document, counter.count_text, room)
        ctx.transforms.append(f"map_reduce:{len(chunks)}")
        maps = [request.model_copy(update={
            "messages": [ChatMessage.model_validate(m) for m in
                         dec.map_messages(system, c, question, k, len(chunks))],
            "max_tokens": policy.map_max_tokens, "max_completion_tokens": None})
            for k, c in enumerate(chunks)]
        results = await asyncio.gather(*(collect(forwarder.forward(ctx, r)) for r in maps),
                                       return_exceptions=True)
        answers = [r[0] for r in results if not isinstance(r, BaseException)]
        if not answers:
            raise next(r for r in results if isinstance(r, BaseException))
        usage = sum((r[2] for r in results if not isinstance(r, BaseException)), Usage())
        final = _with_messages(request, dec.reduce_messages(system, question, answers))
        async for chunk in forwarder.forward(ctx, final):
            if chunk.usage is not None:
                chunk = chunk.model_copy(update={"usage": chunk.usage + usage})
            yield chunk

    # ------------------------------------------------------------------ helpers

    def counter(self, route: RouteConfig) -> TokenCounter:
        """The token counter of the route's upstream (engine tokenizer, tiktoken, litellm)."""
        if route.upstream not in self._counters:
            up = self.config.upstreams[route.upstream]
            tokenizer = getattr(self.engine, "tokenizer", None)
            model = up.model or route.name
            self._counters[route.upstream] = counter_for(up.kind, model, tokenizer)
        return self._counters[route.upstream]

    def _context_tokens(self, route: RouteConfig) -> int:
        if route.decompose.context_tokens:
            return route.decompose.context_tokens
        if self.config.upstreams[route.upstream].kind == "engine" and self.engine is not None:
            return int(getattr(self.engine, "max_model_len", DEFAULT_CONTEXT))
        return DEFAULT_CONTEXT

    def _summary_sender(self, ctx: RequestContext, forwarder: Forwarder) -> Send:
        """Where the summary of dropped turns is asked: the route's `window.summarizer`
        upstream when it names another one (no fallback), else the route's own way."""
        name = ctx.route.window.summarizer
        if not name or name == ctx.route.upstream or name not in self.config.upstreams:
            return partial(forwarder.forward, ctx)
        if name not in self._upstreams:
            from gateway.upstreams import build_upstream

            self._upstreams[name] = build_upstream(self.config.upstreams[name], self.engine)
        upstream = self._upstreams[name]
        return lambda request: upstream.stream(request, ctx)

    async def token_scorer(self) -> EngineModelScorer:
        """The pruning scorer, loaded on first use on a worker thread (seconds)."""
        if self._scorer is None:
            up = self.config.engine_upstream()
            # on a CPU it scores between the engine's steps (see app.share_step_thread)
            shared = self.engine is not None and self.engine.on_cpu
            self._scorer = await asyncio.to_thread(
                EngineModelScorer, up.path if up else None,
                executor=self.engine.executor if shared else None)
        return self._scorer

    async def _measured(self, upstream: str, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Pass chunks through, learning the upstream's prefill rate (tokens/s to first chunk)."""
        t0, first = time.perf_counter(), None
        async for chunk in chunks:
            first = first or time.perf_counter()
            if chunk.usage is not None and first is not None:
                fresh = chunk.usage.prompt_tokens - chunk.usage.prompt_tokens_details.cached_tokens
                if fresh >= 256 and first > t0:
                    seen = fresh / (first - t0)
                    old = self.prefill_tps.get(upstream)
                    self.prefill_tps[upstream] = seen if old is None else 0.8 * old + 0.2 * seen
            yield chunk


def _with_messages(request: ChatCompletionRequest, messages: list[Message]) -> ChatCompletionRequest:
    return request.model_copy(update={"messages": [ChatMessage.model_validate(m)
                                                   for m in messages]})


def _chunk(cid: str, model: str, delta: DeltaMessage, finish: str | None = None) -> Any:
    return ChatCompletionChunk(id=cid, model=model,
                               choices=[ChunkChoice(delta=delta, finish_reason=finish)])


def _reason(error: BaseException | None) -> str:
    return getattr(error, "message", None) or str(error) or type(error).__name__


def _shared_embed() -> Any:
    try:
        from cache.embedder import Embedder
    except ImportError:
        return None
    return Embedder.shared().embed
