"""What every upstream offers the pipeline: OpenAI requests in, streamed OpenAI chunks out.

Upstreams hand the pipeline chunks; the last one carries `usage`. A streamed request is
streamed. A non-streamed one may be asked upstream without streaming (`answers_whole`),
which saves both sides the stream's framing (the OpenAI-compatible upstream does this): its
`answer()` is then the whole answer, and its chunks are that answer as one chunk.
Failures before the first chunk are raised as
`APIError(502|503|504, "upstream 'NAME': ...")` so the pipeline can try a fallback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from gateway.config import UpstreamConfig
from gateway.upstreams.call import UpstreamCall
from openai_api import (
    APIError,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)


class Upstream(ABC):
    """One configured upstream; `name` is its key under `upstreams:`."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.name = config.name

    def model_for(self, request_model: str) -> str:
        """The model name sent upstream: the configured one, else the client's."""
        return self.config.model or request_model

    def error(self, status: int, what: str, *, code: str | None = None) -> APIError:
        return APIError(status, f"upstream '{self.name}': {what}", code=code)

    @abstractmethod
    def stream_chat(
        self, request: ChatCompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[ChatCompletionChunk]: ...

    @abstractmethod
    def stream_completion(
        self, request: CompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[Completion]: ...

    def answers_whole(self, request: ChatCompletionRequest | CompletionRequest) -> bool:
        """True when `request` is asked upstream unstreamed, so `answer()` serves it."""
        return False

    async def answer(self, request: ChatCompletionRequest | CompletionRequest,
                     call: UpstreamCall) -> ChatCompletion | Completion:
        """The whole answer to a request this upstream `answers_whole`."""
        raise NotImplementedError(f"upstream '{self.name}' streams its answers")

    def stream(
        self, request: ChatCompletionRequest | CompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[ChatCompletionChunk | Completion]:
        if isinstance(request, ChatCompletionRequest):
            return self.stream_chat(request, call)
        return self.stream_completion(request, call)

    async def start(self) -> None:
        """Open pools or load models (called once by the app's lifespan)."""
        return None

    async def aclose(self) -> None:
        """Release pools (called once at shutdown)."""
        return None

    def collector(self) -> Any:
        """Prometheus metrics of its own (a fleet's per-endpoint series), or None."""
        return None
