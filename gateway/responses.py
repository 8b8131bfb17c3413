"""The pipeline's chunks written straight to the ASGI connection: SSE when the client
streams, else one JSON object folded from the chunks. Both carry the context's headers
(`x-request-id`, `x-cache`, `Server-Timing`, ...).

Plain ASGI messages rather than Starlette response objects: a `StreamingResponse` runs an
anyio task group per request to notice disconnects, which costs more CPU than the rest of
a cached answer. Here one `ClientWatch` task per request does that job for both shapes.
The status line and headers go out in the same write as the body or the first SSE frame,
and the last frame with the end of the body (`CoalescedSend`).

A streamed request waits for its first chunk before answering, so failures before any
token (unknown upstream, timeout, 4xx from the upstream) still get a proper HTTP status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.types import Message, Receive

from gateway.coalesced_send import CoalescedSend
from gateway.context import RequestContext
from gateway.pipeline import Pipeline, unfinished
from gateway.sse import write_sse
from openai_api import APIError, Chunk, WholeAnswer
from openai_api.assemble import Assembler

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ClientWatch:
    """Cancels the request's task when the client disconnects. Uvicorn reports a
    disconnect only through `receive()`, so one task waits on it for the whole answer;
    cancelling the request closes the pipeline, which aborts the upstream request."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.gone = False
        self._task = asyncio.current_task()
        self._stopped = False
        self._watch = self._arm()

    def _arm(self) -> asyncio.Future[Any]:
        watch = asyncio.ensure_future(self.receive())
        watch.add_done_callback(self._on_message)
        return watch

    def _on_message(self, watch: asyncio.Future[Any]) -> None:
        if self._stopped or watch.cancelled() or watch.exception() is not None:
            return
        if watch.result().get("type") != "http.disconnect":
            self._watch = self._arm()  # not a disconnect: keep watching
            return
        self.gone = True
        if self._task is not None:
            self._task.cancel()

    def stop(self) -> None:
        self._stopped = True
        self._watch.cancel()


def response_headers(ctx: RequestContext) -> list[tuple[bytes, bytes]]:
    """The headers of an answer, from what the pipeline found out (`ctx.report`), as ASGI
    sends them: rendered straight to bytes, since a streamed answer's first frame waits on
    them."""
    report = ctx.report
    cache = report.cache
    headers = [(b"x-request-id", ctx.request_id.encode("latin-1")),
               (b"x-cache", cache.status.encode())]
    if cache.similarity is not None:
        headers.append((b"x-cache-similarity", b"%.4f" % cache.similarity))
    if cache.skipped:
        headers.append((b"x-cache-bypass-reason", cache.skipped.encode("latin-1")))
    if report.transforms:
        headers.append((b"x-headstart-transforms", ",".join(report.transforms).encode("latin-1")))
    if ctx.timings.stages:
        headers.append((b"server-timing", ctx.timings.header()))
    if report.upstream:
        headers.append((b"x-headstart-upstream", report.upstream.encode("latin-1")))
    if report.endpoint:
        headers.append((b"x-headstart-endpoint", report.endpoint.encode("latin-1")))
    if ctx.limit_headers:
        headers.extend(ctx.limit_headers)
    return headers


async def send_json(send: CoalescedSend, status: int, body: bytes,
                    headers: list[tuple[bytes, bytes]]) -> None:
    """A whole JSON response, status line to body in one write."""
    await send.send_all({"type": "http.response.start", "status": status,
                         "headers": [*headers, *JSON_HEADERS,
                                     (b"content-length", b"%d" % len(body))]},
                        {"type": "http.response.body", "body": body})


async def write_answer(ctx: RequestContext, pipeline: Pipeline, send: CoalescedSend) -> None:
    """Run the pipeline for `ctx` and write its answer (raises `APIError` before the
    response has started; after that, errors travel in-band as SSE error frames)."""
    if ctx.body.stream:
        await _stream(ctx, pipeline.run(ctx), send)
        return
    answer = await whole_answer(ctx, pipeline)
    ctx.timings.add("total", (time.perf_counter() - ctx.started) * 1000)
    body = ctx.report.upstream_body or answer.model_dump_json().encode()
    await send_json(send, 200, body, response_headers(ctx))


async def whole_answer(ctx: RequestContext, pipeline: Pipeline) -> WholeAnswer:
    """The pipeline's answer to an unstreamed request as one object: the upstream's own
    where the pipeline needs no chunks (`answer_whole`), else its chunks folded."""
    if pipeline.answers_whole(ctx):
        return await pipeline.answer_whole(ctx)
    assembler = Assembler(ctx.kind, ctx.body.model)
    chunks = pipeline.run(ctx, split=False, assembler=assembler)  # fills `assembler`
    async with aclosing(chunks):  # type: ignore[type-var]
        async for _ in chunks:
            pass
    if assembler.finish_reason is None:
        raise unfinished(ctx)
    return assembler.response()


async def _stream(ctx: RequestContext, chunks: AsyncIterator[Chunk], send: CoalescedSend) -> None:
    first, start = await open_stream(ctx, chunks)
    await write_sse(first, chunks, ctx.body.wants_usage_chunk(), send, start)


async def open_stream(ctx: RequestContext, chunks: AsyncIterator[Chunk]
                      ) -> tuple[Chunk, Message]:
    """A stream's first chunk and the status line and headers to send with it. A failure
    before the first chunk is raised here, so it still gets its own HTTP status."""
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        raise APIError(502, "the upstream returned no answer", code="upstream_error") from None
    except BaseException:
        await chunks.aclose()  # type: ignore[attr-defined]
        raise
    return first, {"type": "http.response.start", "status": 200,
                   "headers": response_headers(ctx) + SSE_HEADERS}
