"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, `headstart engine`, another
gateway) over a pool of keep-alive connections (`HTTPPool`).

A request is asked the way the client asked it: a streamed one streamed (with the usage
chunk), a non-streamed one unstreamed, its whole answer handed on as one chunk. Asking it
streamed too would cost the upstream a frame per token and the gateway a parse per frame:
about 0.3 ms more per short answer from a `headstart engine`, all of it on the answer's path.
The route's `timeout_s` bounds the upstream's silence, so it then bounds the whole answer;
`always_stream: true` asks every request streamed, timing each gap between chunks instead.

The gateway's own overhead is mostly this hop, so it uses the lean pool rather than a
general HTTP client (measured per streamed request: httpx ~1.3 ms of CPU, aiohttp ~0.2 ms,
the pool ~0.03 ms). HTTP(S)_PROXY is not used (a warning says so). Closing the chunk
iterator before the end closes the connection, so the upstream sees the disconnect and
aborts its request (a `headstart engine` frees the request's KV blocks).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.request import getproxies, proxy_bypass

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from gateway.config import UpstreamConfig
from gateway.sse import SSEDataReader, keep_wire
from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall
from gateway.upstreams.http_pool import ConnectFailed, HTTPPool, Response
from openai_api import (
    APIError,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)
from openai_api.assemble import as_chunk

log = logging.getLogger("headstart.gateway")
_NOT_FORWARDED = {"cache", "session_id", "stream", "stream_options"}
_REWRITTEN = _NOT_FORWARDED - {"stream"} | {"n"}  # fields `_payload` drops or changes
_USAGE_OPTION = b'"stream_options":{"include_usage":true},'


class OpenAICompatUpstream(Upstream):
    def __init__(self, config: UpstreamConfig) -> None:
        super().__init__(config)
        self.headers = {"content-type": "application/json", **config.headers}
        if config.api_key:
            self.headers["authorization"] = f"Bearer {config.api_key}"
        self.base_url = (config.base_url or "").rstrip("/")
        self._pool: HTTPPool | None = None

    async def start(self) -> None:
        pool = self.pool()
        scheme = self.base_url.split(":", 1)[0]
        if scheme in getproxies() and not proxy_bypass(pool.host):
            log.warning("upstream %r: %s_proxy is set, but this upstream connects directly",
                        self.name, scheme)

    def pool(self) -> HTTPPool:
        """The connection pool, created on first use inside the running loop."""
        if self._pool is None:
            self._pool = HTTPPool(self.base_url, self.headers, self.config.max_connections)
        return self._pool

    def streamed(self, request: ChatCompletionRequest | CompletionRequest) -> bool:
        """Whether `request` is asked upstream streamed."""
        return bool(request.stream) or self.config.always_stream

    def stream_chat(
        self, request: ChatCompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream("/chat/completions", request, call, ChatCompletionChunk)

    def stream_completion(
        self, request: CompletionRequest, call: UpstreamCall
    ) -> AsyncIterator[Completion]:
        return self._stream("/completions", request, call, Completion)

    def _payload(self, request: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
        payload = request.model_dump(exclude_none=True, exclude=_NOT_FORWARDED)
        if payload.get("n") == 1:
            del payload["n"]  # the default; some servers reject the field
        payload["model"] = self.model_for(request.model)
        if self.streamed(request):
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def _json(self, request: ChatCompletionRequest | CompletionRequest,
              call: UpstreamCall) -> bytes:
        """`_payload` as JSON, or the client's own bytes when they say the same: the
        client's request as it came, for this model name, with none of the fields
        `_payload` drops or changes and no top-level null (nested values go as written),
        unstreamed or streamed at the client's asking (the usage option then goes in as
        the object's first member). Rendering it again would cost about 40 µs on the
        request's way upstream once the gateway has idled."""
        if call.cache_salt != request.cache_salt or call.priority != request.priority:
            # the gateway's salt (gateway/kv_isolation.py) or the route's priority
            payload = self._payload(request)
            for key, value in (("cache_salt", call.cache_salt), ("priority", call.priority)):
                payload.pop(key, None)
                if value is not None:
                    payload[key] = value
            return to_json(payload)
        raw = call.client_json
        if (raw is not None
                and self.model_for(request.model) == request.model
                and (request.stream or not self.config.always_stream)):
            fields = request.model_fields_set
            if fields.isdisjoint(_REWRITTEN) and all(getattr(request, f) is not None
                                                     for f in fields):
                if not request.stream:
                    return raw
                start = raw.index(b"{") + 1  # a JSON object: only whitespace before it
                return raw[:start] + _USAGE_OPTION + raw[start:]
        return to_json(self._payload(request))

    def answers_whole(self, request: ChatCompletionRequest | CompletionRequest) -> bool:
        return not self.streamed(request)

    async def answer(self, request: ChatCompletionRequest | CompletionRequest,
                     call: UpstreamCall) -> ChatCompletion | Completion:
        chat = isinstance(request, ChatCompletionRequest)
        response = await self._post("/chat/completions" if chat else "/completions", request, call)
        async with response:
            try:
                raw = await response.read()
            except OSError as e:  # the connection broke mid-answer
                raise self.error(502, f"{type(e).__name__}: {e}", code="upstream_error") from None
            if response.status >= 400:
                raise self._status_error(response.status, raw)
            answer = self._parse(raw, ChatCompletion if chat else Completion)
            call.body = raw  # valid as it came: the client may get these very bytes
            return answer

    async def _post(self, path: str, request: Any, call: UpstreamCall) -> Response:
        """The upstream's response to `request` once its status and headers are in."""
        headers = {"x-request-id": call.request_id}
        if call.session_id:
            headers["x-session-id"] = call.session_id
        data = self._json(request, call)
        try:
            return await self.pool().post(path, data, headers)
        except TimeoutError:
            raise self.error(504, f"timed out connecting to {self.base_url}",
                             code="upstream_timeout") from None
        except ConnectFailed as e:
            raise self.error(503, f"cannot connect to {self.base_url} ({e})",
                             code="upstream_unavailable") from None
        except OSError as e:  # connected, then dropped before an answer
            raise self.error(502, f"{type(e).__name__}: {e}", code="upstream_error") from None

    async def _stream(self, path: str, request: Any, call: UpstreamCall,
                      chunk_type: type[BaseModel]) -> AsyncIterator[Any]:
        if not self.streamed(request):  # the whole answer as one chunk
            answer = await self.answer(request, call)
            yield as_chunk(answer) if isinstance(answer, ChatCompletion) else answer
            return
        response = await self._post(path, request, call)
        async with response:
            try:
                if response.status >= 400:
                    raise self._status_error(response.status, await response.read())
                events = SSEDataReader()
                while (piece := await response.next_piece()) is not None:  # to the end: the
                    for payload in events.feed(piece):  # connection then goes back to the pool
                        yield keep_wire(self._parse(payload, chunk_type), payload)
                for payload in events.end():
                    yield keep_wire(self._parse(payload, chunk_type), payload)
            except OSError as e:  # the connection broke mid-answer
                raise self.error(502, f"{type(e).__name__}: {e}", code="upstream_error") from None

    def _parse(self, data: str | bytes, chunk_type: type[BaseModel]) -> Any:
        try:
            return chunk_type.model_validate_json(data)
        except ValidationError:
            try:
                obj = json.loads(data)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
                message = obj["error"].get("message") or "error"
                raise self.error(502, f"error in the answer: {message}") from None
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            raise self.error(502, f"unexpected answer: {text[:200]}") from None

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
        if self._pool is not None:
            await self._pool.aclose()
