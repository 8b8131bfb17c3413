"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, `headstart engine`, another
gateway) over one pooled `httpx.AsyncClient`, always streaming.

Closing the chunk iterator closes the HTTP stream, so the upstream sees the disconnect and
aborts its request (a `headstart engine` frees the request's KV blocks).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

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

_NOT_FORWARDED = {"cache", "session_id", "stream", "stream_options"}


class OpenAICompatUpstream(Upstream):
    def __init__(self, config: UpstreamConfig) -> None:
        super().__init__(config)
        headers = dict(config.headers)
        if config.api_key:
            headers["authorization"] = f"Bearer {config.api_key}"
        self.base_url = (config.base_url or "").rstrip("/")
        self.client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(connect=10.0, read=None, write=30.0, pool=30.0),
            limits=httpx.Limits(max_connections=config.max_connections,
                                max_keepalive_connections=config.max_connections),
        )

    def stream_chat(
        self, request: ChatCompletionRequest, ctx: RequestContext
    ) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream("/chat/completions", request, ctx, ChatCompletionChunk)

    def stream_completion(
        self, request: CompletionRequest, ctx: RequestContext
    ) -> AsyncIterator[Completion]:
        return self._stream("/completions", request, ctx, Completion)

    def _payload(self, request: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
        payload = request.model_dump(exclude_none=True, exclude=_NOT_FORWARDED)
        if payload.get("n") == 1:
            del payload["n"]  # the default; some servers reject the field
        payload["model"] = self.model_for(request.model)
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        return payload

    async def _stream(self, path: str, request: Any, ctx: RequestContext,
                      chunk_type: type[BaseModel]) -> AsyncIterator[Any]:
        headers = {"x-request-id": ctx.request_id}
        if ctx.session_id:
            headers["x-session-id"] = ctx.session_id
        try:
            async with self.client.stream("POST", path, json=self._payload(request),
                                          headers=headers) as response:
                if response.status_code >= 400:
                    raise self._status_error(response.status_code, await response.aread())
                done = False
                async for line in response.aiter_lines():  # read to the end: the connection
                    if done or not line.startswith("data:"):  # then goes back to the pool
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    yield self._parse(data, chunk_type)
        except httpx.ConnectError as e:
            raise self.error(503, f"cannot connect to {self.base_url} ({e})",
                             code="upstream_unavailable") from None
        except httpx.TimeoutException:
            raise self.error(504, f"timed out talking to {self.base_url}",
                             code="upstream_timeout") from None
        except httpx.HTTPError as e:
            raise self.error(502, f"{type(e).__name__}: {e}", code="upstream_error") from None

    def _parse(self, data: str, chunk_type: type[BaseModel]) -> Any:
        try:
            return chunk_type.model_validate_json(data)
        except ValidationError:
            try:
                obj = json.loads(data)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
                message = obj["error"].get("message") or "error"
                raise self.error(502, f"error mid-stream: {message}") from None
            raise self.error(502, f"unexpected chunk: {data[:200]}") from None

    def _status_error(self, status: int, raw: bytes) -> APIError:
        """Client errors keep their status (the caller must fix the request); server errors
        become 502, an overloaded upstream 503."""
        try:
            detail = json.loads(raw)["error"]
            message, param, code = detail.get("message"), detail.get("param"), detail.get("code")
        except (ValueError, KeyError, TypeError):
            message, param, code = raw[:300].decode("utf-8", "replace"), None, None
        if status in (400, 404, 413, 422, 429):
            err = self.error(status, f"{message}", code=code)
            err.param = param
            return err
        mapped = 503 if status == 503 else 504 if status == 504 else 502
        return self.error(mapped, f"HTTP {status}: {message}", code=code or "upstream_error")

    async def aclose(self) -> None:
        await self.client.aclose()
