"""`GatewayHttpProtocol`: generation requests served straight from uvicorn's parser, over raw
sockets, answered exactly as uvicorn's own protocol answers them."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest
import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.server import ServerState

from gateway import http_protocol
from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.http_protocol import GatewayHttpProtocol, direct_target, find_gateway
from tests.gateway.conftest import GatewayThread

LIMIT = 2048
GOOD = json.dumps({"model": "remote", "max_tokens": 1, "temperature": 0,
                   "messages": [{"role": "user", "content": "Say ok."}]}).encode()


def config(engine_url: str) -> dict:
    return {"upstreams": {"remote": {"kind": "openai", "base_url": engine_url + "/v1",
                                     "model": "smollm2-135m-instruct"}},
            "routes": [{"name": "remote", "models": ["remote"], "upstream": "remote"}],
            "limits": {"max_body_bytes": LIMIT}}


@pytest.fixture(scope="module")
def gateways(engine_server) -> Iterator[dict[str, GatewayThread]]:
    """The same config behind the gateway's protocol ("direct") and uvicorn's ("uvicorn")."""
    started = {"direct": GatewayThread(config(engine_server.base_url)).start(),
               "uvicorn": GatewayThread(config(engine_server.base_url), http="httptools").start()}
    yield started
    for gateway in started.values():
        gateway.stop()


def post(body: bytes, *, path: str = "/v1/chat/completions", extra: str = "",
         version: str = "1.1") -> bytes:
    head = (f"POST {path} HTTP/{version}\r\nhost: test\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}\r\n")
    return head.encode() + body


def chunked(body: bytes) -> bytes:
    head = ("POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\n"
            "transfer-encoding: chunked\r\n\r\n")
    return head.encode() + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)


class Reader:
    """Reads whole responses (Content-Length bodies) off one socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.buffer += data

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        size = int(headers["content-length"])
        while len(self.buffer) < size:
            self._fill()
        body, self.buffer = self.buffer[:size], self.buffer[size:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True


def connect(gateway: GatewayThread) -> Reader:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=60)
    return Reader(sock)


def ask(gateway: GatewayThread, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader = connect(gateway)
    with reader.sock:
        reader.sock.sendall(raw)
        return reader.response()


def test_find_gateway_unwraps_uvicorn_middleware_only():
    app = create_app(GatewayConfig.from_dict(config("http://127.0.0.1:9"), source="<test>"))
    assert find_gateway(ProxyHeadersMiddleware(app)) is app
    assert find_gateway(app) is app

    class Foreign:
        def __init__(self, inner) -> None:
            self.app = inner

    assert find_gateway(Foreign(app)) is None


def test_direct_targets_are_worked_out_once_per_url(monkeypatch):
    monkeypatch.setattr(http_protocol, "_TARGETS", {})
    monkeypatch.setattr(http_protocol, "_MAX_TARGETS", 3)
    chat = (("/v1/chat/completions", b"/v1/chat/completions", b"a=1"), ("chat/completions", None))
    assert direct_target(b"/v1/chat/completions?a=1") == chat
    assert direct_target(b"/v1/chat/completions?a=1") is http_protocol._TARGETS[
        b"/v1/chat/completions?a=1"]  # remembered
    assert direct_target(b"/r/blue/v1/completions/")[1] == ("completions", "blue")
    assert direct_target(b"/v1/embeddings") is None  # served by FastAPI
    assert list(http_protocol._TARGETS) == [b"/v1/chat/completions?a=1",
                                            b"/r/blue/v1/completions/", b"/v1/embeddings"]
    assert direct_target(b"/v1/chat%2Fcompletions") is None  # uvicorn unquotes it
    assert list(http_protocol._TARGETS) == [b"/v1/chat%2Fcompletions"]  # was full: started again


BAD_REQUESTS = {
    "not json": post(b"{nope"),
    "not utf-8": post(b'{"model": "remote", "messages": "\xff"}'),
    "missing messages": post(b'{"model": "remote"}'),
    "unknown model": post(b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}'),
    "too large (declared)": post(b"x" * (LIMIT + 1)),
    "too large (chunked)": chunked(b"x" * (LIMIT + 1)),
    "route path": post(b"{}", path="/r/nope/v1/completions"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_errors_match_uvicorns_own_protocol(gateways, name):
    answers = {kind: ask(gateway, BAD_REQUESTS[name]) for kind, gateway in gateways.items()}
    (status, headers, body), (status2, headers2, body2) = answers["direct"], answers["uvicorn"]
    assert status == status2 and status >= 400
    assert json.loads(body) == json.loads(body2)
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    drop = {"date", "x-request-id"}
    assert {k: v for k, v in headers.items() if k not in drop} \
        == {k: v for k, v in headers2.items() if k not in drop}


def test_answers_match_uvicorns_own_protocol(gateways):
    answers = {kind: ask(gateway, post(GOOD, extra="x-request-id: same-id\r\n"))
               for kind, gateway in gateways.items()}
    (status, headers, body), (status2, headers2, body2) = answers["direct"], answers["uvicorn"]
    assert status == status2 == 200
    assert headers["x-request-id"] == "same-id" and headers["x-cache"] == "bypass"
    assert "upstream;dur=" in headers["server-timing"]
    assert set(headers) == set(headers2)
    assert json.loads(body).keys() == json.loads(body2).keys()
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"
    assert json.loads(body)["usage"]["completion_tokens"] == 1


def test_keep_alive_and_pipelined_requests_answer_in_order(gateways):
    reader = connect(gateways["direct"])
    with reader.sock:
        first = post(GOOD, extra="x-request-id: one\r\n")
        second = post(b"{nope", extra="x-request-id: two\r\n")
        third = post(GOOD, extra="x-request-id: three\r\n")
        reader.sock.sendall(first + second)  # the second waits behind the first
        ids = [reader.response()[1]["x-request-id"] for _ in range(2)]
        reader.sock.sendall(third)  # same connection, kept alive
        ids.append(reader.response()[1]["x-request-id"])
    assert ids == ["one", "two", "three"]


def test_chunked_request_body_is_read(gateways):
    status, _, body = ask(gateways["direct"], chunked(GOOD))
    assert status == 200, body


def test_http_1_0_and_connection_close_close_after_the_answer(gateways):
    for raw in (post(GOOD, version="1.0"), post(GOOD, extra="connection: close\r\n")):
        reader = connect(gateways["direct"])
        with reader.sock:
            reader.sock.sendall(raw)
            status, headers, _ = reader.response()
            assert status == 200
            assert headers["connection"] == "close"
            assert reader.closed()


def test_expect_100_continue_still_answers(gateways):
    reader = connect(gateways["direct"])
    with reader.sock:
        request = post(GOOD, extra="expect: 100-continue\r\n")
        reader.sock.sendall(request[:-len(GOOD)])  # the headers only, then wait
        raw = b""
        while b"\r\n\r\n" not in raw:
            raw += reader.sock.recv(4096)
        assert raw.startswith(b"HTTP/1.1 100 Continue")
        reader.buffer = raw.split(b"\r\n\r\n", 1)[1]
        reader.sock.sendall(GOOD)
        status, _, body = reader.response()
    assert status == 200, body


def test_client_gone_before_the_body_ends_leaves_the_server_serving(gateways):
    sock = socket.create_connection(("127.0.0.1", gateways["direct"].port))
    sock.sendall(post(GOOD)[:-10])  # the body never completes
    sock.close()
    assert ask(gateways["direct"], post(GOOD))[0] == 200


def test_generation_requests_take_the_direct_path(gateways, monkeypatch):
    from gateway import http_protocol

    served: list[str] = []
    original = http_protocol.DirectExchange.start

    def start(self) -> None:
        served.append(self.scope["path"])
        original(self)

    monkeypatch.setattr(http_protocol.DirectExchange, "start", start)
    assert ask(gateways["direct"], post(GOOD))[0] == 200
    assert ask(gateways["direct"], post(b"{}", path="/v1/embeddings"))[0] == 400
    assert ask(gateways["uvicorn"], post(GOOD))[0] == 200
    assert served == ["/v1/chat/completions"]


class RecordingTransport(asyncio.Transport):
    """Keeps what the protocol writes (no socket: the handler is replaced)."""

    def __init__(self) -> None:
        super().__init__()
        self.written, self.closed = b"", False

    def write(self, data: bytes) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def protocol_with(handler, monkeypatch) -> tuple[RecordingTransport, asyncio.Task | None]:
    """A `GatewayHttpProtocol` fed one generation request whose handler is `handler`."""
    app = create_app(GatewayConfig.from_dict(config("http://127.0.0.1:9"), source="<test>"))
    uv_config = uvicorn.Config(app, http=GatewayHttpProtocol, log_level="critical")
    uv_config.load()
    protocol = GatewayHttpProtocol(uv_config, ServerState(), {})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    monkeypatch.setattr("gateway.http_protocol.serve_generation", handler)
    protocol.data_received(post(GOOD))
    return transport, protocol.cycle.task


async def test_a_handler_that_never_answers_gets_a_500(monkeypatch):
    async def silent(*args) -> None:
        return None

    transport, task = protocol_with(silent, monkeypatch)
    await task
    assert transport.written.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert transport.closed


async def test_a_body_longer_than_its_content_length_closes_the_connection(monkeypatch):
    async def liar(app, scope, receive, send, *target) -> None:
        assert (await receive())["body"] == GOOD
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}{}"})

    transport, task = protocol_with(liar, monkeypatch)
    await task
    assert transport.written == b"" and transport.closed
