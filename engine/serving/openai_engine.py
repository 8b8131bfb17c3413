"""The engine behind the OpenAI API: OpenAI requests in, OpenAI chunks out.

What the engine's own server (`engine/serving/server.py`) and the gateway's in-process
upstream both call, so a request is turned into engine requests, run, and turned back into
chunks one way: the prompt and sampling parameters by `inputs`, `n` choices as `n` engine
requests by `choices`, the chunks by `answers`, latencies by `EngineMetrics`. A request the
engine refuses raises `APIError(400)` from the first `anext`, before any chunk; closing the
chunk stream aborts the engine requests and frees their KV blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import aclosing
from functools import partial

from engine.async_engine import AsyncEngine
from engine.errors import InvalidRequest
from engine.serving import answers, inputs
from engine.serving.choices import generate_choices, start_choice
from engine.serving.kv_transfer import Handover, refuse_handover
from engine.serving.metrics import EngineMetrics
from engine.serving.tool_answers import with_tool_calls
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    GenerationRequest,
    new_id,
)


class OpenAIEngine:
    """One `AsyncEngine` served over the OpenAI API's request and chunk types."""

    def __init__(self, engine: AsyncEngine, metrics: EngineMetrics | None = None) -> None:
        self.engine = engine
        self.metrics = metrics if metrics is not None else EngineMetrics(engine)
        self._seq = itertools.count()

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def stream(self, request: GenerationRequest, *, request_id: str | None = None,
               session_id: str | None = None, cache_salt: str | None = None,
               include_usage: bool = True, completion_id: str | None = None,
               priority: int | None = None, handover: Handover | None = None,
               ) -> AsyncIterator[ChatCompletionChunk | Completion]:
        """The chunks of the answer to `request` (a usage chunk last with `include_usage`),
        with the id `completion_id` (default: a new one). `request_id` names the engine
        requests (made unique here: sub-requests may share one); `session_id` and
        `cache_salt` key its KV blocks, `priority` (default: the request's) orders it
        (vLLM's meanings); `handover` is its part in a prefill/decode handover
        (engine/serving/kv_transfer.py)."""
        rid = f"{request_id or new_id('req')}-{next(self._seq)}"
        if priority is None:
            priority = request.priority or 0
        keys = (rid, session_id, cache_salt, include_usage, completion_id, priority, handover)
        if isinstance(request, ChatCompletionRequest):
            return self._chat(request, *keys)
        return self._completion(request, *keys)

    async def _chat(self, request: ChatCompletionRequest, rid: str, session_id: str | None,
                    cache_salt: str | None, include_usage: bool, completion_id: str | None,
                    priority: int, handover: Handover | None
                    ) -> AsyncIterator[ChatCompletionChunk]:
        engine = self.engine
        if handover is None:
            refuse_handover(request)
        prepared = inputs.chat_input(request, engine.tokenizer, engine.max_model_len,
                                     engine.engine.grammars)
        start = partial(start_choice, engine, self.metrics, "chat", session_id, cache_salt,
                        priority=priority)
        if handover is not None:
            start = handover.wrap(start)
        deltas = generate_choices(start, prepared.requests(), prepared.n, rid)
        chunks = answers.stream_chat(deltas, model=request.model, n=request.n,
                                     include_usage=include_usage, completion_id=completion_id)
        if prepared.tool_stream is not None:  # the request offers tools: parse calls out
            chunks = with_tool_calls(chunks, prepared.tool_stream)
        async with aclosing(deltas), aclosing(chunks):
            try:
                async for chunk in chunks:
                    yield chunk
            except InvalidRequest as e:
                raise APIError(400, e.message, param=e.param) from None

    async def _completion(self, request: CompletionRequest, rid: str, session_id: str | None,
                          cache_salt: str | None, include_usage: bool,
                          completion_id: str | None, priority: int,
                          handover: Handover | None) -> AsyncIterator[Completion]:
        engine = self.engine
        if handover is None:
            refuse_handover(request)
        prepared = inputs.completion_input(request, engine.tokenizer, engine.max_model_len)
        start = partial(start_choice, engine, self.metrics, "completion", session_id, cache_salt,
                        priority=priority)
        if handover is not None:
            start = handover.wrap(start)
        deltas = generate_choices(start, prepared.requests(), prepared.n, rid)
        chunks = answers.stream_completion(deltas, model=request.model, n=request.n,
                                           include_usage=include_usage,
                                           echoes=prepared.echoes(),
                                           completion_id=completion_id)
        async with aclosing(deltas), aclosing(chunks):
            try:
                async for chunk in chunks:
                    yield chunk
            except InvalidRequest as e:
                raise APIError(400, e.message, param=e.param) from None
