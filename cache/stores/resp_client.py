"""A minimal pipelined Redis client for the exact cache's hot read (one `HMGET` per hit).

redis-py spends most of an exact hit's CPU on its own machinery (pool checkout with locks,
retry wrappers, command packing, a line-by-line reply parser). This client keeps one
connection, writes each command at once and resolves replies in order from a queue of
futures, so concurrent lookups share the socket (pipelining) and cost a few microseconds
each. It speaks only what the store needs (RESP2 replies: simple strings, errors,
integers, bulk strings, arrays) and raises `ConnectionError`/`TimeoutError` on any
failure, after which the next call reconnects. Everything else stays on redis-py.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any
from urllib.parse import unquote, urlsplit


class RespError(Exception):
    """An error reply from Redis (`-ERR ...`)."""


def pack(*args: bytes | str) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Parser:
    """Incremental RESP2 reply parser: `feed(data)` then `replies()`."""

    def __init__(self) -> None:
        self.buf = b""
        self.pos = 0

    def feed(self, data: bytes) -> None:
        self.buf = self.buf[self.pos:] + data if self.pos else self.buf + data
        self.pos = 0

    def replies(self) -> list[Any]:
        out = []
        while True:
            start = self.pos
            try:
                out.append(self._one())
            except IndexError:  # incomplete: wait for more data
                self.pos = start
                return out

    def _line(self) -> bytes:
        end = self.buf.find(b"\r\n", self.pos)
        if end < 0:
            raise IndexError
        line, self.pos = self.buf[self.pos:end], end + 2
        return line

    def _one(self) -> Any:
        line = self._line()
        if not line:
            raise ConnectionError("redis: malformed reply")
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            end = self.pos + n
            if len(self.buf) < end + 2:
                raise IndexError
            data, self.pos = self.buf[self.pos:end], end + 2
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._one() for _ in range(n)]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"-":
            return RespError(rest.decode("utf-8", "replace"))
        raise ConnectionError(f"redis: unexpected reply type {kind!r}")


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = _Parser()
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        try:
            replies = self.parser.replies()
        except (ValueError, ConnectionError) as e:
            self.fail(ConnectionError(f"redis: bad reply ({e})"))
            return
        for reply in replies:
            if not self.waiting:
                self.fail(ConnectionError("redis: reply without a request"))
                return
            future = self.waiting.popleft()
            if not future.done():
                if isinstance(reply, RespError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(ConnectionError(f"redis: connection lost ({exc or 'closed'})"))

    def fail(self, exc: Exception) -> None:
        """Fail every pending call and drop the connection (replies would be out of step)."""
        self.closed = True
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class RespClient:
    """`await client.command("HMGET", key, "meta", "answer")` over one pipelined
    connection to the Redis at `url` (`redis://[[user]:password@]host[:port][/db]`)."""

    def __init__(self, url: str, timeout_s: float = 0.25) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"RespClient speaks plain redis:// only, not {parts.scheme}://")
        self.host, self.port = parts.hostname or "localhost", parts.port or 6379
        self.db = int(parts.path.lstrip("/") or 0)
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.timeout_s = timeout_s
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    async def _connection(self) -> _Protocol:
        if self._proto is not None and not self._proto.closed:
            return self._proto
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.timeout_s):
            _, proto = await loop.create_connection(_Protocol, self.host, self.port)
            try:
                if self.password is not None:
                    auth = (self.username, self.password) if self.username else (self.password,)
                    await self._send(proto, "AUTH", *auth)
                if self.db:
                    await self._send(proto, "SELECT", str(self.db))
            except BaseException:
                proto.fail(ConnectionError("redis: connection setup failed"))
                raise
        self._proto = proto
        return proto

    @staticmethod
    def _send(proto: _Protocol, *args: bytes | str) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        proto.waiting.append(future)
        assert proto.transport is not None
        proto.transport.write(pack(*args))
        return future

    async def command(self, *args: bytes | str) -> Any:
        """The reply to one command; `TimeoutError` after `timeout_s` (the connection is
        then dropped), `ConnectionError` when Redis is unreachable, `RespError` for an
        error reply."""
        proto = await self._connection()
        future = self._send(proto, *args)
        timer = asyncio.get_running_loop().call_later(self.timeout_s, _expire, proto, future)
        try:
            return await future
        finally:
            timer.cancel()

    def close(self) -> None:
        if self._proto is not None:
            self._proto.fail(ConnectionError("redis: client closed"))
            self._proto = None


def _expire(proto: _Protocol, future: asyncio.Future[Any]) -> None:
    if not future.done():
        proto.fail(TimeoutError("redis: no reply in time"))
