"""An ASGI `send` that can write several response messages in one socket write.

Uvicorn writes every ASGI message as soon as it is sent: a JSON answer is two writes
(status line + headers, then the body), a stream's headers and first frame two more. On
loopback each write is a system call that also runs the receiver's side of TCP, the
largest single cost of a short passthrough request. `send_all(...)` hands uvicorn a
buffer in place of its transport for the duration of the messages (uvicorn's `send` only
calls `transport.write`/`close` and does not suspend unless writing is paused), then
writes the buffer once. Any other ASGI server, or paused writing, gets the messages one
by one as usual.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Send


class _WriteBuffer:
    """Stands in for the transport while messages are rendered."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.close_requested = False

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def close(self) -> None:
        self.close_requested = True

    def is_closing(self) -> bool:
        return False


class CoalescedSend:
    """The ASGI `send` of one response; remembers whether the response has started."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        cycle: Any = getattr(send, "__self__", None)  # uvicorn's RequestResponseCycle
        has_parts = all(hasattr(cycle, a) for a in ("transport", "flow", "disconnected"))
        self._cycle = cycle if has_parts else None

    async def __call__(self, message: Message) -> None:
        self.started = True
        await self.send(message)

    async def send_all(self, *messages: Message) -> None:
        """Send `messages` in order, in one write when the server allows it."""
        self.started = True
        cycle = self._cycle
        if cycle is None or cycle.disconnected or cycle.flow.write_paused:
            for message in messages:
                await self.send(message)
            return
        transport, buffer = cycle.transport, _WriteBuffer()
        cycle.transport = buffer
        try:
            for message in messages:
                await self.send(message)
        finally:
            cycle.transport = transport
        if buffer.parts:
            transport.write(b"".join(buffer.parts))
        if buffer.close_requested:
            transport.close()
