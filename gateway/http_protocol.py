"""uvicorn's HTTP protocol with the generation endpoints served straight from the parser.

For every request uvicorn builds a `RequestResponseCycle` (an `asyncio.Event`, a `receive`
coroutine that waits on it, a `send` that re-checks every header), runs the app through its
proxy-headers middleware in a new task and, for the gateway, one more task that waits on
`receive()` for a disconnect. A `POST` to a generation endpoint (`gateway/generation.py`)
skips that: `DirectExchange` collects the body from the parser's callbacks and, once it is
in, runs `serve_generation` with a `receive` that hands over the whole body at once (after
that, a plain future resolved on disconnect) and a `send` that renders the response onto the
transport, status line and headers in the same write as the first body bytes.

Everything else takes uvicorn's own path: other endpoints, WebSocket upgrades,
`Expect: 100-continue`, a request pipelined behind one still being answered, a `root_path`
or `limit_concurrency` setting. Serve with `uvicorn.Config(app, **server_options(config))`.

Every request, on either path, is bounded in size and time by the config's `limits`
(`gateway/bounded_protocol.py`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from gateway.app import GatewayApp
from gateway.bounded_protocol import BoundedHttpProtocol
from gateway.config import GatewayConfig, LimitsConfig
from gateway.generation import match, serve_generation

log = logging.getLogger("headstart.gateway")

_BAD_HEADER_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")  # as uvicorn: no header injection
_DISCONNECT = {"type": "http.disconnect"}

# ((path, raw path, query), (endpoint, route)): where a request target leads on this path
Target = tuple[tuple[str, bytes, bytes], tuple[str, str | None]]
_TARGETS: dict[bytes, Target | None] = {}  # by the URL as sent: clients repeat a few URLs
_MAX_TARGETS = 256


def direct_target(url: bytes) -> Target | None:
    """Where `url` leads when it names a generation endpoint, else None (remembered)."""
    try:
        return _TARGETS[url]
    except KeyError:
        pass
    parsed = httptools.parse_url(url)
    path = parsed.path.decode("ascii")
    found = match(path) if "%" not in path else None
    target = None if found is None else ((path, parsed.path, parsed.query or b""), found)
    if len(_TARGETS) >= _MAX_TARGETS:
        _TARGETS.clear()
    _TARGETS[url] = target
    return target


def find_gateway(app: Any) -> GatewayApp | None:
    """The `GatewayApp` under uvicorn's own wrappers (proxy headers, message logger)."""
    while not isinstance(app, GatewayApp):
        if not type(app).__module__.startswith("uvicorn."):
            return None
        app = getattr(app, "app", None)
    return app


class _NoEvent:
    """uvicorn's `connection_lost` sets its cycle's `message_event`; the exchange needs none."""

    def set(self) -> None:
        return None


_NO_EVENT = _NoEvent()


def server_options(config: GatewayConfig) -> dict[str, Any]:
    """uvicorn settings for serving the gateway: this protocol, and WebSocket messages
    bounded like request bodies (a larger frame closes the socket with 1009)."""
    return {"http": GatewayHttpProtocol, "ws": "websockets-sansio",
            "ws_max_size": config.limits.max_body_bytes}


class GatewayHttpProtocol(BoundedHttpProtocol):
    """uvicorn's httptools protocol, bounded (`BoundedHttpProtocol`), that hands generation
    requests to a `DirectExchange`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        gateway = find_gateway(self.app)
        limits = gateway.state.config.limits if gateway is not None else LimitsConfig()
        self.bound(limits)
        super().connection_made(transport)
        direct = self.limit_concurrency is None and not self.root_path
        self.gateway = gateway if direct else None
        self.body_limit: int = limits.max_body_bytes

    def on_message_complete(self) -> None:
        if isinstance(self.cycle, DirectExchange):
            self.disarm()
            self.cycle.start()
        else:
            super().on_message_complete()

    def on_headers_complete(self) -> None:
        target = self._direct_target()
        if target is None:
            super().on_headers_complete()
            return
        self.arm("body")
        parser, scope = self.parser, self.scope
        http_version = parser.get_http_version()
        scope["method"] = "POST"
        if http_version != "1.1":
            scope["http_version"] = http_version
        scope["path"], scope["raw_path"], scope["query_string"] = target[0]
        scope["app"] = self.gateway
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        self.cycle = DirectExchange(self, scope, keep_alive, target[1])  # type: ignore[assignment]

    def _direct_target(self) -> Target | None:
        """Where the request leads, when this path serves it."""
        if (self.gateway is None or self.expect_100_continue
                or self.parser.get_method() != b"POST" or self.parser.should_upgrade()
                or not (self.cycle is None or self.cycle.response_complete)):
            return None
        return direct_target(self.url)

    def on_body(self, body: bytes) -> None:
        if isinstance(self.cycle, DirectExchange):
            self.cycle.add_body(body)
        else:
            super().on_body(body)

    def connection_lost(self, exc: Exception | None) -> None:
        exchange = self.cycle
        super().connection_lost(exc)
        if isinstance(exchange, DirectExchange):
            exchange.lost()


class DirectExchange:
    """One generation request and its response on a `GatewayHttpProtocol`. Stands in for
    uvicorn's cycle on the protocol (`response_complete`, `disconnected`, `keep_alive`,
    `message_event`), so shutdown, keep-alive and pipelining work unchanged."""

    def __init__(self, protocol: GatewayHttpProtocol, scope: dict[str, Any], keep_alive: bool,
                 target: tuple[str, str | None]) -> None:
        self.protocol = protocol
        self.scope = scope
        self.keep_alive = keep_alive
        self.target = target
        self.message_event = _NO_EVENT
        self.disconnected = False
        self.response_started = self.response_complete = False
        self.task: asyncio.Task[None] | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = protocol.body_limit
        self._delivered = False
        self._watch: asyncio.Future[dict[str, Any]] | None = None
        self._head: bytes | None = None
        self._remaining: int | None = None  # bytes of body still due (None: chunked)

    # ------------------------------------------------------------ from the parser

    def add_body(self, body: bytes) -> None:
        if self.task is not None:
            return  # answered already (413): the rest of the body is dropped
        self._parts.append(body)
        self._size += len(body)
        if self._size > self._limit:
            self.start()  # `receive_body` sees more than the limit and answers 413

    def start(self) -> None:
        """Run the handler once the body is in (or over the limit)."""
        if self.task is not None:
            return
        protocol = self.protocol
        context = contextvars.Context() if protocol.config.reset_contextvars else None
        self.task = protocol.loop.create_task(self._run(), context=context)
        self.task.add_done_callback(protocol.tasks.discard)
        protocol.tasks.add(self.task)

    def lost(self) -> None:
        if self._watch is not None and not self._watch.done():
            self._watch.set_result(_DISCONNECT)

    # ------------------------------------------------------------ the ASGI side

    async def _run(self) -> None:
        try:
            await serve_generation(self.protocol.gateway.generation, self.scope, self.receive,
                                   self.send, *self.target)
        except asyncio.CancelledError:
            self.protocol.transport.close()  # the server is shutting down
            raise
        except Exception:  # serve_generation answers its own failures; this is a bug
            log.exception("unhandled error on the direct path")
        if not self.response_started and not self.disconnected:
            await self._send_500()
        elif not self.response_complete and not self.disconnected:
            self.protocol.transport.close()

    def receive(self) -> asyncio.Future[dict[str, Any]]:
        """The whole body the first time; then a future resolved when the client leaves
        (a future, not a coroutine: `ensure_future` on it makes no task)."""
        future = self.protocol.loop.create_future()
        if not self._delivered:
            self._delivered = True
            body = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
            future.set_result({"type": "http.request", "body": body, "more_body": False})
        elif self.disconnected or self.response_complete:
            future.set_result(_DISCONNECT)
        else:
            self._watch = future
        return future

    async def send(self, message: dict[str, Any]) -> None:
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"Expected 'http.response.start', got {message['type']!r}")
            self.response_started = True
            self._head = self._render_head(message["status"], message.get("headers", ()))
            return
        if self.response_complete or message["type"] != "http.response.body":
            raise RuntimeError(f"Unexpected ASGI message {message['type']!r}")
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if self._remaining is None:  # chunked
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            self._remaining -= len(body)
            if self._remaining < 0 or (not more and self._remaining):
                raise RuntimeError("Response body does not match its Content-Length")
            data = body
        if self._head is not None:
            data, self._head = self._head + data, None
        if data:
            protocol.transport.write(data)
        if not more:
            self.response_complete = True
            if not self.keep_alive:
                protocol.transport.close()
            protocol.on_response_complete()

    def _render_head(self, status: int, headers: Any) -> bytes:
        parts, has_close = [STATUS_LINE[status]], False
        for name, value in (*self.protocol.server_state.default_headers, *headers):
            if _BAD_HEADER_VALUE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            if name == b"content-length":
                self._remaining = int(value)
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive, has_close = False, True
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_close:
            parts.append(b"connection: close\r\n")
        if self._remaining is None:
            parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500,
                         "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                     (b"content-length", b"21"), (b"connection", b"close")]})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})
