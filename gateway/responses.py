"""The pipeline's chunks as an HTTP response: SSE when the client streams, else one JSON
object folded from the chunks. Both carry the context's headers (`x-request-id`, `x-cache`,
`Server-Timing`, ...).

A streamed request waits for its first chunk before answering, so failures before any
token (unknown upstream, timeout, 4xx from the upstream) still get a proper HTTP status.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from engine.protocol import APIError
from gateway.assemble import Assembler
from gateway.context import RequestContext
from gateway.pipeline import Chunk
from gateway.sse import sse_frames

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def respond(request: Request, ctx: RequestContext) -> Response:
    request.state.ctx = ctx  # the error handlers add x-request-id from it
    chunks = request.app.state.pipeline.run(ctx)
    if ctx.body.stream:
        return await _streaming(chunks, ctx)
    assembler = Assembler(ctx.kind, ctx.body.model)
    await until_disconnected(request, fold(chunks, assembler))
    if assembler.finish_reason is None:
        raise APIError(502, f"upstream '{ctx.upstream_name}': the answer ended without a "
                       "finish reason", code="upstream_error")
    ctx.timings.add("total", (time.perf_counter() - ctx.started) * 1000)
    return Response(assembler.response().model_dump_json(), media_type="application/json",
                    headers=headers(ctx))


def headers(ctx: RequestContext) -> dict[str, str]:
    """The context's headers, plus which upstream answered (`x-headstart-upstream`)."""
    out = ctx.response_headers()
    if ctx.upstream_name:
        out["x-headstart-upstream"] = ctx.upstream_name
    return out


async def fold(chunks: AsyncIterator[Chunk], assembler: Assembler) -> None:
    async with contextlib.aclosing(chunks):  # type: ignore[type-var]
        async for chunk in chunks:
            assembler.add(chunk)


async def until_disconnected(request: Request, work: Coroutine[Any, Any, None]) -> None:
    """Run `work`; if the client hangs up first, cancel it (which aborts the upstream
    request) rather than finish an answer nobody will read."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we are cancelled ourselves (shutdown)
        task.cancel()
        gone.cancel()
        raise
    gone.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise APIError(499, "client closed the request", code="client_closed")
    task.result()


async def _disconnect(request: Request) -> None:
    """Returns when the client disconnects (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _streaming(chunks: AsyncIterator[Chunk], ctx: RequestContext) -> Response:
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        raise APIError(502, "the upstream returned no answer", code="upstream_error") from None
    except BaseException:
        await chunks.aclose()  # type: ignore[attr-defined]
        raise
    body = client_view(first, chunks, ctx.body.wants_usage_chunk())
    return StreamingResponse(sse_frames(body), media_type="text/event-stream",
                             headers={**headers(ctx), **SSE_HEADERS})


async def client_view(first: Chunk, rest: AsyncIterator[Chunk],
                      include_usage: bool) -> AsyncIterator[Chunk]:
    """The chunks the client asked for: the usage-only chunk only with
    `stream_options.include_usage` (as OpenAI does). Closing this closes `rest`."""
    try:
        for chunk in _visible(first, include_usage):
            yield chunk
        async for chunk in rest:
            for visible in _visible(chunk, include_usage):
                yield visible
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


def _visible(chunk: Chunk, include_usage: bool) -> tuple[Chunk, ...]:
    if include_usage:
        return (chunk,)
    if not chunk.choices:
        return ()
    chunk.usage = None
    return (chunk,)
