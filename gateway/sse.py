"""Server-sent events: one `data: {json}` frame per chunk, ending with `data: [DONE]`.

Once the first byte has gone out the HTTP status can no longer change, so an error after
that becomes an OpenAI-style error frame (`data: {"error": {...}}`) and the stream ends.
`SSEDataReader` reads the same format back from an upstream; the chunks read from it keep
the JSON they came as (`keep_wire`), and are written on as that JSON while nothing changed
them (`drop_wire` when something does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

from pydantic import BaseModel
from starlette.types import Message

from gateway.coalesced_send import CoalescedSend
from openai_api import APIError, ChatCompletionChunk, Completion

log = logging.getLogger("headstart.gateway")

DONE = b"data: [DONE]\n\n"
Chunk = ChatCompletionChunk | Completion


def keep_wire(chunk: Chunk, payload: bytes) -> Chunk:
    """Keep `payload`, the JSON `chunk` was read from, to write it on as it came (`frame`).
    It goes in pydantic's slot for private attributes, which chunk models leave empty: a
    declared private attribute would cost a Python call (its initialiser) per chunk parsed."""
    object.__setattr__(chunk, "__pydantic_private__", {"wire": payload})
    return chunk


def drop_wire(chunk: BaseModel) -> None:
    """Forget the JSON `chunk` came as: it is about to change (or may have)."""
    private = chunk.__pydantic_private__
    if private:
        private["wire"] = None


def frame(chunk: BaseModel) -> bytes:
    """The chunk's SSE frame: the JSON it came as, when it kept it, else rendered. Rendering
    again costs about 50 µs on a stream's first frame once the gateway has idled."""
    private = chunk.__pydantic_private__
    wire = private.get("wire") if private else None
    if wire is None:
        wire = chunk.model_dump_json().encode()
    return b"data: " + wire + b"\n\n"


def error_frame(err: APIError) -> bytes:
    return b"data: " + json.dumps(err.body()).encode() + b"\n\n"


async def write_sse(first: Chunk, rest: AsyncIterator[Chunk], include_usage: bool,
                    send: CoalescedSend, start: Message) -> None:
    """`first`, then the chunks of `rest`, written as frames to `send`, `start` (the status
    line and headers) in the same write as the first; `[DONE]` (or an error frame, for an
    exception mid-stream) is the last. The usage-only chunk is written only with
    `include_usage` (as OpenAI does). `rest` is closed however this ends, which aborts the
    upstream request when the client has gone. One loop rather than a chain of generators:
    each chunk of each stream passes through here."""
    pending: Message | None = start

    async def write(frame: bytes, last: bool) -> None:
        nonlocal pending
        body = {"type": "http.response.body", "body": frame, "more_body": not last}
        if pending is None:
            await send(body)
        else:  # the headers go out with the first frame
            await send.send_all(pending, body)
            pending = None

    chunk: Chunk | None = first
    try:
        async with aclosing(rest):  # type: ignore[type-var]
            while chunk is not None:
                if include_usage or chunk.choices:
                    if not include_usage and chunk.usage is not None:
                        chunk.usage = None
                        drop_wire(chunk)
                    await write(frame(chunk), False)
                chunk = await anext(rest, None)
    except APIError as e:
        await write(error_frame(e), True)
        return
    except Exception as e:  # noqa: BLE001 - the status is already sent; tell the client in-band
        log.exception("stream failed mid-way")
        await write(error_frame(APIError(500, f"stream failed: {type(e).__name__}")), True)
        return
    await write(DONE, True)


class SSEDataReader:
    """The `data:` payloads of an SSE byte stream fed in arbitrary network pieces, up to
    `data: [DONE]` (anything after it is read and ignored). Splitting whole reads here
    costs far less than reading the stream line by line."""

    def __init__(self) -> None:
        self._tail = b""
        self.done = False

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        return self._payloads(lines)

    def end(self) -> list[bytes]:
        """Payloads of a last line that had no newline."""
        tail, self._tail = self._tail, b""
        return self._payloads([tail])

    def _payloads(self, lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            if self.done or not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
            else:
                out.append(payload)
        return out
