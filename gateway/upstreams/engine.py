"""The bundled engine in the gateway's own process: no HTTP hop, no serialisation.

The engine's `OpenAIEngine` turns requests into engine requests and deltas into chunks, as
it does for `headstart engine`'s own server. Closing the chunk iterator aborts the request
and frees its KV blocks. A request the engine fails is this upstream's 502, so the route's
fallback may answer it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

from engine import OpenAIEngine
from gateway.config import UpstreamConfig
from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)


class EngineUpstream(Upstream):
    def __init__(self, config: UpstreamConfig, engine: OpenAIEngine) -> None:
        super().__init__(config)
        self.engine = engine

    def stream_chat(self, request: ChatCompletionRequest,
                    call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        return self.stream(request, call)  # type: ignore[return-value]

    def stream_completion(self, request: CompletionRequest,
                          call: UpstreamCall) -> AsyncIterator[Completion]:
        return self.stream(request, call)  # type: ignore[return-value]

    async def stream(self, request: ChatCompletionRequest | CompletionRequest,
                     call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk | Completion]:
        chunks = self.engine.stream(request, request_id=call.request_id,
                                    session_id=call.session_id, cache_salt=call.cache_salt,
                                    priority=call.priority)
        try:
            async with aclosing(chunks):
                async for chunk in chunks:
                    yield chunk
        except APIError as e:
            if e.code != "engine_aborted":
                raise
            raise self.error(502, e.message, code="engine_aborted") from None

    async def aclose(self) -> None:
        """The engine itself is shut down by the app that created it."""
