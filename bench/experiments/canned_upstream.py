"""An OpenAI-compatible server that gives every chat request the same one-token answer after
a fixed delay: an upstream with no jitter and no CPU of its own, for measuring a proxy's
own cost (`python -m bench.experiments.gateway_overhead --canned-upstream DELAY_MS`).

    python -m bench.experiments.canned_upstream --port 8011 [--delay-ms 25]

Answers `GET /health` and `POST /v1/chat/completions`, streamed (the frames a `headstart
engine` sends for a one-token answer, usage included, in one write) or not. The delay stands
in for the engine's forward pass: both sides of the hop then idle as long as they would in
front of a real model, which on a shared virtual machine makes the next request's code run
from cold caches.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httptools

MODEL = "smollm2-135m-instruct"
_ID, _CREATED = "chatcmpl-canned", 1_700_000_000
_USAGE = {"prompt_tokens": 38, "completion_tokens": 1, "total_tokens": 39,
          "prompt_tokens_details": {"cached_tokens": 32}}


def _frame(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(choices: list[dict], usage: dict | None = None) -> dict:
    return {"id": _ID, "object": "chat.completion.chunk", "created": _CREATED, "model": MODEL,
            "choices": choices, "usage": usage}


ANSWER = json.dumps({
    "id": _ID, "object": "chat.completion", "created": _CREATED, "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                 "finish_reason": "length"}],
    "usage": _USAGE}).encode()
STREAM = b"".join([
    _frame(_chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None}])),
    _frame(_chunk([{"index": 0, "delta": {"content": "OK"}, "finish_reason": "length"}])),
    _frame(_chunk([], _USAGE)),
    b"data: [DONE]\n\n"])


def _response(status: str, content_type: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: " + content_type
            + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)


class CannedProtocol(asyncio.Protocol):
    """One keep-alive connection; requests are answered in order."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.last: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()  # type: ignore[union-attr]

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body, self.url, self.body = self.url, b"".join(self.body), b"", []
        method = self.parser.get_method()
        previous = self.last
        self.last = asyncio.ensure_future(self._answer(previous, method, url, body))

    async def _answer(self, previous: asyncio.Future | None, method: bytes, url: bytes,
                      body: bytes) -> None:
        if previous is not None:
            await previous  # HTTP/1.1: answers go out in the order of the requests
        if method == b"GET" and url == b"/health":
            out = _response("200 OK", b"application/json", b'{"status":"ok"}')
        elif method == b"POST" and url == b"/v1/chat/completions":
            try:
                stream = bool(json.loads(body).get("stream"))
            except (ValueError, AttributeError):
                stream = None
            if stream is None:
                out = _response("400 Bad Request", b"application/json",
                                 b'{"error":{"message":"bad JSON","type":"invalid_request_error"}}')
            else:
                await asyncio.sleep(self.delay_s)
                out = _response("200 OK", b"text/event-stream", STREAM) if stream \
                    else _response("200 OK", b"application/json", ANSWER)
        else:
            out = _response("404 Not Found", b"application/json",
                            b'{"error":{"message":"not found","type":"invalid_request_error"}}')
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)


async def serve(port: int, delay_s: float, host: str = "127.0.0.1") -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CannedProtocol(delay_s), host, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.canned_upstream",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=25.0,
                        help="wait before each chat answer (default 25: a short engine step)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.port, args.delay_ms / 1000))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
