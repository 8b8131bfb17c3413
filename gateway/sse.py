"""Server-sent events: one `data: {json}` frame per chunk, ending with `data: [DONE]`.

Once the first byte has gone out the HTTP status can no longer change, so an error after
that becomes an OpenAI-style error frame (`data: {"error": {...}}`) and the stream ends.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

from pydantic import BaseModel

from engine.protocol import APIError

log = logging.getLogger("headstart.gateway")

DONE = b"data: [DONE]\n\n"


def frame(chunk: BaseModel) -> bytes:
    return b"data: " + chunk.model_dump_json().encode() + b"\n\n"


def error_frame(err: APIError) -> bytes:
    return b"data: " + json.dumps(err.body()).encode() + b"\n\n"


async def sse_frames(chunks: AsyncIterator[BaseModel]) -> AsyncIterator[bytes]:
    """SSE bytes for `chunks`; an exception mid-stream ends it with an error frame. Closing
    this stream (client gone) closes `chunks`, which aborts the upstream request."""
    try:
        async with aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                yield frame(chunk)
    except APIError as e:
        yield error_frame(e)
        return
    except Exception as e:  # noqa: BLE001 - the status is already sent; tell the client in-band
        log.exception("stream failed mid-way")
        yield error_frame(APIError(500, f"stream failed: {type(e).__name__}"))
        return
    yield DONE
