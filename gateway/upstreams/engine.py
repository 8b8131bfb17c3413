"""The bundled engine in the gateway's own process: no HTTP hop, no serialisation.

Requests are turned into prompts and sampling parameters by `engine.openai_adapter`, and
engine deltas into OpenAI chunks by `engine.openai_answers` (the functions the engine's own
server uses); a request for `n` choices runs as `n` engine requests (`engine.choices`).
Closing the chunk iterator closes the engine's delta stream, which aborts the request and
frees its KV blocks. With the engine's `EngineMetrics`, each engine request's deltas pass
through its `observe` (TTFT, queue time), as they do in `headstart engine`'s server.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from engine import openai_adapter, openai_answers
from engine.choices import IndexedDelta, generate_choices
from engine.errors import InvalidRequest
from engine.metrics import EngineMetrics
from engine.protocol import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)
from gateway.config import UpstreamConfig
from gateway.context import RequestContext
from gateway.upstreams.base import Upstream


class EngineUpstream(Upstream):
    def __init__(self, config: UpstreamConfig, engine: Any,
                 metrics: EngineMetrics | None = None) -> None:
        super().__init__(config)
        self.engine = engine
        self.metrics = metrics
        self._seq = itertools.count()

    async def stream_chat(
        self, request: ChatCompletionRequest, ctx: RequestContext
    ) -> AsyncIterator[ChatCompletionChunk]:
        inp = openai_adapter.chat_input(request, self.engine.tokenizer, self.engine.max_model_len)
        deltas = self._deltas(inp, ctx, "chat")
        try:
            chunks = openai_answers.stream_chat(deltas, model=request.model, n=request.n,
                                                include_usage=True)
            async with aclosing(chunks):
                async for chunk in chunks:
                    yield chunk
        finally:
            await deltas.aclose()

    async def stream_completion(
        self, request: CompletionRequest, ctx: RequestContext
    ) -> AsyncIterator[Completion]:
        inp = openai_adapter.completion_input(request, self.engine.tokenizer,
                                              self.engine.max_model_len)
        deltas = self._deltas(inp, ctx, "completion")
        try:
            chunks = openai_answers.stream_completion(deltas, model=request.model, n=request.n,
                                                      include_usage=True, echoes=inp.echoes())
            async with aclosing(chunks):
                async for chunk in chunks:
                    yield chunk
        finally:
            await deltas.aclose()

    async def _deltas(self, inp: openai_adapter.EngineInput, ctx: RequestContext,
                      endpoint: str) -> AsyncIterator[IndexedDelta]:
        request_id = f"{ctx.request_id}-{next(self._seq)}"  # sub-requests share a ctx

        def start(ids: list[int], params: Any, engine_request_id: str) -> AsyncIterator[Any]:
            deltas = self.engine.generate(ids, params, request_id=engine_request_id,
                                          session_id=ctx.session_id, cache_salt=ctx.cache_salt)
            return deltas if self.metrics is None else self.metrics.observe(deltas, endpoint)

        try:
            stream = generate_choices(start, inp.requests(), inp.n, request_id)
            async with aclosing(stream):
                async for index, delta in stream:
                    if delta.finish_reason == "abort":
                        reason = getattr(delta, "error", None) or "aborted"
                        raise self.error(502, f"the engine failed the request: {reason}",
                                         code="engine_aborted")
                    yield index, delta
        except InvalidRequest as e:
            raise APIError(400, e.message, param=e.param) from None

    async def aclose(self) -> None:
        """The engine itself is shut down by the app that created it."""
