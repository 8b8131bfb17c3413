"""The lean upstream HTTP client against real sockets: keep-alive reuse, a retry when an idle
connection was closed by the server, chunked / sized / close-delimited bodies, a released
half-read response closing its connection, and connect failures."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.upstreams.http_pool import ConnectFailed, HTTPPool
from tests.support.processes import free_port

CHUNKED = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
           b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
SIZED = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nx-thing: A\r\n\r\nok"
CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"


class Server:
    """Answers each request on a connection with the next canned response; counts
    connections and requests; `close_after` closes a connection after that many answers;
    `hold` answers with headers and one chunk, then waits for the client to leave."""

    def __init__(self, responses: list[bytes], close_after: int | None = None,
                 hold: bool = False) -> None:
        self.responses, self.close_after, self.hold = responses, close_after, hold
        self.connections = self.requests = 0
        self.client_left = asyncio.Event()

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                self.requests += 1
                if self.hold:
                    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                                 b"3\r\nabc\r\n")
                    await reader.read()  # until the client closes
                    self.client_left.set()
                    return
                writer.write(self.responses[(self.requests - 1) % len(self.responses)])
                answered += 1
                if self.close_after is not None and answered >= self.close_after:
                    await writer.drain()
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return


async def test_keep_alive_reuses_one_connection():
    async with Server([CHUNKED, SIZED]) as server:
        pool = HTTPPool(server.url, {"content-type": "application/json"})
        async with await pool.post("/chat/completions", b"{}", {"x-request-id": "1"}) as r:
            assert r.status == 200 and await r.read() == b"hello world"
        async with await pool.post("/chat/completions", b"{}", {}) as r:
            assert r.status == 201 and r.headers[b"x-thing"] == b"A"
            assert await r.read() == b"ok"
        assert server.connections == 1 and server.requests == 2 and pool.idle == 1
        await pool.aclose()


async def test_idle_connection_closed_by_the_server_is_retried():
    async with Server([SIZED], close_after=1) as server:
        pool = HTTPPool(server.url, {})
        for _ in range(3):
            async with await pool.post("/x", b"{}", {}) as r:
                assert await r.read() == b"ok"
            await asyncio.sleep(0.05)  # the server's close reaches us, or races the next send
        assert server.requests == 3 and server.connections == 3
        await pool.aclose()


async def test_close_delimited_body_ends_cleanly():
    async with Server([CLOSE_DELIMITED]) as server:
        pool = HTTPPool(server.url, {})
        server.close_after = 1
        async with await pool.post("/x", b"{}", {}) as r:
            assert await r.read() == b"until the end"
        assert pool.idle == 0  # `connection: close` is never reused
        await pool.aclose()


async def test_releasing_a_half_read_response_closes_its_connection():
    async with Server([], hold=True) as server:
        pool = HTTPPool(server.url, {})
        async with await pool.post("/x", b"{}", {}) as r:
            assert await r.next_piece() == b"abc" and pool.in_use == 1
        await asyncio.wait_for(server.client_left.wait(), 5)
        assert pool.idle == 0 and pool.in_use == 0
        await pool.aclose()


async def test_refused_connection_is_connect_failed():
    pool = HTTPPool(f"http://127.0.0.1:{free_port()}/v1", {})
    with pytest.raises(ConnectFailed):
        await pool.post("/x", b"{}", {})


async def test_a_silent_server_is_abandoned_by_cancelling():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        pool = HTTPPool(f"http://127.0.0.1:{silent.getsockname()[1]}", {})
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await pool.post("/x", b"{}", {})
        assert pool.idle == 0 and pool.in_use == 0  # slot given back, connection dropped
