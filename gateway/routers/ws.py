"""WebSocket `/v1/ws`: many chat-completion requests over one socket, one at a time.

The client sends a chat-completion request as a JSON message and receives the same
`chat.completion.chunk` objects as JSON messages (the last one with `usage`), then
`{"type": "done", ...}`. Bad requests get `{"type": "error", "error": {...}}` and the socket
stays open. One socket is one session: its `session_id` (from `?session_id=`, the
`x-session-id` header, or generated) reaches the engine so the conversation's KV cache stays
warm between turns. The first message the server sends is `{"type": "session", ...}`.

The socket is read by a background task for its whole life (`SocketReader`), so a client
that leaves mid-answer is noticed at once, not at the next chunk: the answer is cancelled,
which aborts the upstream request (the engine frees its KV blocks) even while the upstream
is still silent. Requests sent while an answer streams wait their turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from gateway.auth import Caller
from gateway.deps import (
    AuthDep,
    ConfigDep,
    PipelineDep,
    RateLimitsDep,
    RoutesDep,
)
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.request_setup import admit
from gateway.responses import response_headers
from gateway.routing import RouteTable
from openai_api import ENDPOINTS, APIError

router = APIRouter(tags=["websocket"])
log = logging.getLogger("headstart.gateway")

POLICY_VIOLATION = 1008


class SocketReader:
    """Receives the socket's messages in the background; on disconnect it cancels the
    answer in progress (`answering`) and `next()` returns None."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.closed = False
        self.answering: asyncio.Task[Any] | None = None
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                self.inbox.put_nowait(message)
        except (WebSocketDisconnect, OSError, RuntimeError):
            return
        finally:
            self.closed = True
            self.inbox.put_nowait(None)
            if self.answering is not None:
                self.answering.cancel()

    async def next(self) -> dict[str, Any] | None:
        return None if self.closed and self.inbox.empty() else await self.inbox.get()

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


@dataclass
class Socket:
    """What every request on one socket shares: the gateway's parts, its limits, the caller
    (its key's rate limits and tenant) and the session."""

    websocket: WebSocket
    pipeline: Pipeline
    routes: RouteTable
    rate_limits: RateLimiter
    max_bytes: int
    route_name: str | None
    caller: Caller | None
    keyed: bool  # the gateway has API keys
    session_id: str


@router.websocket("/v1/ws")
@router.websocket("/r/{route_name}/v1/ws")
async def chat_socket(websocket: WebSocket, auth: AuthDep, config: ConfigDep, routes: RoutesDep,
                      pipeline: PipelineDep, rate_limits: RateLimitsDep,
                      route_name: str | None = None) -> None:
    session_id = (websocket.query_params.get("session_id")
                  or websocket.headers.get("x-session-id") or f"ws-{uuid.uuid4().hex[:16]}")
    await websocket.accept()
    try:
        caller = auth.caller_for(websocket)
    except APIError as e:
        await websocket.send_text(_error(e))
        await websocket.close(code=POLICY_VIOLATION, reason=e.message[:120])
        return
    await websocket.send_text(json.dumps({"type": "session", "session_id": session_id}))
    sock = Socket(websocket, pipeline, routes, rate_limits, config.limits.max_body_bytes,
                  route_name, caller, not auth.open, session_id)
    reader = SocketReader(websocket)
    try:
        while (message := await reader.next()) is not None:
            raw = message.get("bytes") or (message.get("text") or "").encode()
            reader.answering = asyncio.current_task()
            try:
                await _answer(sock, raw)
            except asyncio.CancelledError:
                if not reader.closed:
                    raise  # the server is shutting down
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
                return
            finally:
                reader.answering = None
    except WebSocketDisconnect:
        return
    except (OSError, RuntimeError) as e:  # sending to a socket the client already closed
        log.debug("websocket %s ended: %s", session_id, e)
    finally:
        await reader.close()


async def _answer(sock: Socket, raw: bytes) -> None:
    """One request on the socket: chunks, then `done` (or an `error` message)."""
    websocket, limit = sock.websocket, sock.max_bytes
    ctx = settlement = None
    try:
        if len(raw) > limit:
            raise APIError(413, f"Message too large: the limit is {limit} bytes",
                           code="request_too_large")
        ctx, settlement = await admit(raw, ENDPOINTS["chat/completions"], websocket,
                                      routes=sock.routes, rate_limits=sock.rate_limits,
                                      route_name=sock.route_name, caller=sock.caller,
                                      keyed=sock.keyed, session_id=sock.session_id)
        chunks = sock.pipeline.run(ctx)
        async with aclosing(chunks):  # the client leaving mid-answer aborts the upstream
            async for chunk in chunks:
                await websocket.send_text(chunk.model_dump_json())
    except APIError as e:
        await websocket.send_text(_error(e, ctx.request_id if ctx else None))
        return
    finally:
        if settlement is not None:
            sock.rate_limits.settle_later(settlement, ctx)
    headers = {k.decode(): v.decode("latin-1") for k, v in response_headers(ctx)}
    done: dict[str, Any] = {"type": "done", "request_id": ctx.request_id, "headers": headers}
    await websocket.send_text(json.dumps(done))


def _error(err: APIError, request_id: str | None = None) -> str:
    message = {"type": "error", "request_id": request_id, **err.body()}
    if err.headers:  # a 429's Retry-After and x-ratelimit-*
        message["headers"] = err.headers
    return json.dumps(message)
