"""uvicorn's httptools protocol with every request bounded in size and time, which uvicorn
itself does not do: a connection that sends nothing, headers that never end or a body that
trickles in (slowloris) would hold their connection, and their memory, for ever.

From the config's `limits`: the request line and headers in `max_header_bytes` (431), and
in `header_timeout_s` from the connection or the request's first byte (408); the body in
`body_timeout_s` after the headers (408). The refusal is an OpenAI-style JSON error and the
connection is closed. WebSocket upgrades leave these bounds to their own protocol
(`ws_max_size`, see `gateway/http_protocol.py`'s `server_options`).
"""

from __future__ import annotations

import asyncio
import json

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.config import LimitsConfig
from openai_api import APIError


class BoundedHttpProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` bounded by a `LimitsConfig` (`bound()` before `connection_made`)."""

    limits = LimitsConfig()

    def bound(self, limits: LimitsConfig) -> None:
        self.limits = limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None
        self.arm("headers")

    def arm(self, phase: str) -> None:
        self.disarm()
        seconds = self.limits.header_timeout_s if phase == "headers" else self.limits.body_timeout_s
        self._deadline = self.loop.call_later(seconds, self._timed_out, phase, seconds)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self, phase: str, seconds: float) -> None:
        self._deadline = None
        cycle = self.cycle
        if phase == "headers" and cycle is not None and not cycle.response_complete:
            return  # a pipelined request's headers wait for the answer before it
        if cycle is not None and cycle.response_started:
            self.transport.close()  # answering already: nothing more can be said
            return
        self._refuse(APIError(408, f"The request's {phase} did not arrive within "
                              f"{seconds:g}s", code="request_timeout"))

    def _refuse(self, error: APIError) -> None:
        """Answer `error` and close the connection; the request goes no further."""
        self.disarm()
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnected = True  # an app reading the body sees the client gone
            cycle.message_event.set()
        body = json.dumps(error.body()).encode()
        self.transport.write(b"".join([
            STATUS_LINE[error.status], b"content-type: application/json\r\n",
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body), body]))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # a refusal already answered (its exception ends the parse)
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        if self.cycle is None or self.cycle.response_complete:
            self.arm("headers")

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_header_bytes(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse(APIError(431, "Request headers too large: the limit is "
                                  f"{self.limits.max_header_bytes} bytes",
                                  code="headers_too_large"))
            raise httptools.HttpParserError("headers too large")  # ends the parse

    def on_headers_complete(self) -> None:
        if self.parser.should_upgrade():
            self.disarm()  # a WebSocket: its own protocol bounds its frames
        else:
            self.arm("body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        super().connection_lost(exc)
