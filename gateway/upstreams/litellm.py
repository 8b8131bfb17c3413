"""Any litellm provider string (OpenAI, Anthropic, Azure, Bedrock, ...) through
`litellm.acompletion` / `litellm.atext_completion`, streaming, except for several choices.

litellm's stream wrapper keeps one finish reason per stream (and folds text completions'
choices into index 0), so a request for several choices (`n > 1`, or a batch of prompts) is
asked unstreamed and its whole answer handed on as one chunk.

litellm is imported on first use: it takes seconds to import and most configs never need it.
Its exceptions subclass the `openai` SDK's, which is how they are mapped to 4xx/502/503/504.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import openai

from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    DeltaMessage,
    Usage,
    new_id,
)

_PASSED = ("max_tokens", "temperature", "top_p", "stop", "seed", "presence_penalty",
           "frequency_penalty", "user", "tools", "tool_choice", "response_format", "logprobs",
           "top_logprobs")


class LiteLLMUpstream(Upstream):
    def _kwargs(self, request: ChatCompletionRequest | CompletionRequest,
                call: UpstreamCall) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "drop_params": True,  # providers differ in what they accept
        }
        if request.n > 1:  # the default left out: some providers reject the field
            kwargs["n"] = request.n
        if request.choice_count() == 1:  # several choices are asked unstreamed (see above)
            kwargs.update(stream=True, stream_options={"include_usage": True})
        for field in _PASSED:
            value = getattr(request, field, None)
            if value is not None:
                kwargs[field] = value
        if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens:
            kwargs["max_tokens"] = request.effective_max_tokens()
        if self.config.base_url:
            kwargs["api_base"] = self.config.base_url
        if self.config.api_key:
            kwargs["api_key"] = self.config.api_key
        headers = dict(self.config.headers)
        if call.session_id:
            headers["x-session-id"] = call.session_id
        if headers:
            kwargs["extra_headers"] = headers
        return kwargs

    async def stream_chat(
        self, request: ChatCompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[ChatCompletionChunk]:
        import litellm

        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        stream = await self._call(litellm.acompletion(messages=messages,
                                                      **self._kwargs(request, call)))
        if request.choice_count() > 1:
            yield _chat_chunk(_whole_as_delta(stream.model_dump()), request.model)
            return
        try:
            async for raw in self._guard(stream):
                yield _chat_chunk(raw.model_dump(), request.model)
        finally:
            await _close(stream)

    async def stream_completion(
        self, request: CompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[Completion]:
        import litellm

        stream = await self._call(litellm.atext_completion(prompt=request.prompt,
                                                           **self._kwargs(request, call)))
        if request.choice_count() > 1:
            yield _completion_chunk(stream.model_dump(), request.model)
            return
        try:
            async for raw in self._guard(stream):
                data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
                yield _completion_chunk(data, request.model)
        finally:
            await _close(stream)

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except openai.OpenAIError as e:
            raise self._map(e) from None

    async def _guard(self, stream: Any) -> AsyncIterator[Any]:
        try:
            async for raw in stream:
                yield raw
        except openai.OpenAIError as e:
            raise self._map(e) from None

    def _map(self, e: Exception) -> APIError:
        message = getattr(e, "message", None) or str(e)
        if isinstance(e, openai.APITimeoutError):
            return self.error(504, f"timed out: {message}", code="upstream_timeout")
        if isinstance(e, openai.APIConnectionError):
            return self.error(503, f"cannot connect: {message}", code="upstream_unavailable")
        status = getattr(e, "status_code", None)
        if status in (400, 404, 413, 422, 429):
            return self.error(status, message)
        if status in (503, 504):
            return self.error(status, message)
        return self.error(502, f"{type(e).__name__}: {message}", code="upstream_error")


async def _close(stream: Any) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _usage(raw: Any) -> Usage | None:
    if not raw:
        return None
    details = raw.get("prompt_tokens_details") or {}
    return Usage.of(raw.get("prompt_tokens") or 0, raw.get("completion_tokens") or 0,
                    details.get("cached_tokens") or 0)


def _whole_as_delta(data: dict[str, Any]) -> dict[str, Any]:
    """A whole chat answer as the data of the one chunk that carries all of it."""
    for choice in data.get("choices") or []:
        choice["delta"] = choice.pop("message", None) or {}
    return data


def _chat_chunk(data: dict[str, Any], model: str) -> ChatCompletionChunk:
    choices = []
    for c in data.get("choices") or []:
        delta = c.get("delta") or {}
        choices.append(ChunkChoice(
            index=c.get("index") or 0,
            delta=DeltaMessage(role=delta.get("role") or None, content=delta.get("content"),
                               tool_calls=delta.get("tool_calls") or None),
            finish_reason=c.get("finish_reason"),
            logprobs=c.get("logprobs") or None,
        ))
    return ChatCompletionChunk(id=data.get("id") or new_id("chatcmpl"),
                               created=data.get("created") or int(time.time()), model=model,
                               choices=choices, usage=_usage(data.get("usage")))


def _completion_chunk(data: dict[str, Any], model: str) -> Completion:
    choices = [CompletionChoice(index=c.get("index") or 0, text=c.get("text") or "",
                                finish_reason=c.get("finish_reason"),
                                logprobs=c.get("logprobs") or None)
               for c in data.get("choices") or []]
    return Completion(id=data.get("id") or new_id("cmpl"),
                      created=data.get("created") or int(time.time()), model=model,
                      choices=choices, usage=_usage(data.get("usage")))
