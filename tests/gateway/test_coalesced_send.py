"""`CoalescedSend` against uvicorn's own request cycle: several ASGI messages, one write."""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.coalesced_send import CoalescedSend


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written (uvicorn's cycle only writes and closes)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def cycle(transport: RecordingTransport, keep_alive: bool = True) -> RequestResponseCycle:
    scope = {"type": "http", "method": "POST", "path": "/", "http_version": "1.1",
             "headers": []}
    log = logging.getLogger("test")
    return RequestResponseCycle(scope, transport, FlowControl(transport), log, log, False,
                                [], asyncio.Event(), False, keep_alive, lambda: None)


START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]}
BODY = {"type": "http.response.body", "body": b"{}"}


async def test_start_and_body_go_out_in_one_write():
    transport = RecordingTransport()
    send = CoalescedSend(cycle(transport).send)
    assert not send.started
    await send.send_all(START, BODY)
    assert send.started
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n{}")
    assert not transport.closed


async def test_a_closing_response_closes_after_the_write():
    transport = RecordingTransport()
    await CoalescedSend(cycle(transport, keep_alive=False).send).send_all(START, BODY)
    assert len(transport.writes) == 1 and transport.closed


async def test_single_messages_and_other_servers_pass_through():
    transport = RecordingTransport()
    send = CoalescedSend(cycle(transport).send)
    await send(START)
    await send(BODY)
    assert len(transport.writes) == 2
    got: list[dict] = []

    async def plain(message: dict) -> None:  # not uvicorn: messages one by one
        got.append(message)

    await CoalescedSend(plain).send_all(START, BODY)
    assert got == [START, BODY]


async def test_paused_writing_sends_one_by_one():
    transport = RecordingTransport()
    rrc = cycle(transport)
    rrc.flow.write_paused = True  # (still writable: uvicorn's drain() returns at once)
    await CoalescedSend(rrc.send).send_all(START, BODY)
    assert len(transport.writes) == 2
