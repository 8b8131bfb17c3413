"""The pipelined Redis reader: replies parsed across any split, in order under concurrency,
errors and outages raised as the store expects, reconnecting when Redis returns."""

import asyncio
import socket

import pytest

from cache.stores.resp_client import RespClient, RespError, _Parser, pack


def test_parser_handles_every_split():
    wire = (b"*3\r\n$4\r\nmeta\r\n$-1\r\n$0\r\n\r\n" b"+OK\r\n" b":42\r\n" b"-ERR nope\r\n"
            b"*-1\r\n" b"$5\r\na\r\nbc\r\n")
    for size in (1, 3, len(wire)):
        parser, replies = _Parser(), []
        for i in range(0, len(wire), size):
            parser.feed(wire[i:i + size])
            replies += parser.replies()
        assert replies[:3] == [[b"meta", None, b""], b"OK", 42]
        assert isinstance(replies[3], RespError) and str(replies[3]) == "ERR nope"
        assert replies[4:] == [None, b"a\r\nbc"]


def test_pack():
    assert pack("GET", b"k\r\n") == b"*2\r\n$3\r\nGET\r\n$3\r\nk\r\n\r\n"


async def test_commands_and_pipelined_order(redis_server):
    client = RespClient(redis_server.url)
    try:
        assert await client.command("HSET", "rc:h", "meta", "m", "answer", "é") == 2
        assert await client.command("HMGET", "rc:h", "meta", "answer", "none") == [
            b"m", "é".encode(), None]
        replies = await asyncio.gather(*(client.command("ECHO", str(i)) for i in range(200)))
        assert replies == [str(i).encode() for i in range(200)]
        with pytest.raises(RespError, match="WRONGTYPE"):
            await client.command("GET", "rc:h")
        assert await client.command("PING") == b"PONG"  # an error reply keeps the socket
    finally:
        client.close()


async def test_outage_raises_then_reconnects(fresh_redis):
    client = RespClient(fresh_redis.url)
    try:
        assert await client.command("PING") == b"PONG"
        fresh_redis.stop()
        with pytest.raises(OSError):
            await client.command("PING")
        fresh_redis.start()
        assert await client.command("PING") == b"PONG"
    finally:
        client.close()


async def test_silent_server_times_out():
    with socket.socket() as silent:  # accepts (kernel backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = RespClient(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout_s=0.2)
        with pytest.raises(TimeoutError):
            await client.command("PING")
        client.close()


async def test_selects_the_database_in_the_url(redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/3"
    client = RespClient(url)
    try:
        await client.command("SET", "rc:db", "three")
        assert await client.command("GET", "rc:db") == b"three"
        zero = RespClient(redis_server.url)
        assert await zero.command("GET", "rc:db") is None
        zero.close()
    finally:
        client.close()
