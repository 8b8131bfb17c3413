"""A Responses API request's answer, written to the ASGI connection: the pipeline's chat
chunks translated (`openai_api.responses_from_chat.ResponseBuilder`) into one `response`
object, or into its typed SSE events when the client streams (`event: TYPE` lines, no
`[DONE]`, as OpenAI sends them). Both carry the same headers as a chat answer
(`x-request-id`, `x-cache`, `Server-Timing`, ...).

A finished response is stored (when the request said `store`) before its last byte goes
out, so a client that chains on it at once finds it. Failures before the first event get
their own HTTP status; after it, a `response.failed` event ends the stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

from gateway.coalesced_send import CoalescedSend
from gateway.pipeline import Pipeline, unfinished
from gateway.response_setup import ResponseTurn
from gateway.response_store import ResponseStore, StoredResponse
from gateway.responses import open_stream, response_headers, send_json, whole_answer
from openai_api import APIError, ChatCompletion, Chunk
from openai_api.assemble import as_chunk
from openai_api.responses_from_chat import ResponseBuilder
from openai_api.responses_objects import ResponseEvent

log = logging.getLogger("headstart.gateway")


async def write_response(turn: ResponseTurn, pipeline: Pipeline, store: ResponseStore,
                         send: CoalescedSend) -> None:
    """Run the pipeline for `turn` and write its response (raises `APIError` before the
    response has started)."""
    ctx, builder = turn.ctx, ResponseBuilder(turn.response)
    if turn.request.stream:
        await _stream(turn, builder, pipeline.run(ctx), store, send)
        return
    answer = await whole_answer(ctx, pipeline)
    assert isinstance(answer, ChatCompletion)
    builder.add(as_chunk(answer))
    builder.finish()
    await _keep(turn, builder, store)
    ctx.timings.add("total", (time.perf_counter() - ctx.started) * 1000)
    await send_json(send, 200, builder.response.model_dump_json().encode(),
                    response_headers(ctx))


async def _stream(turn: ResponseTurn, builder: ResponseBuilder, chunks: AsyncIterator[Chunk],
                  store: ResponseStore, send: CoalescedSend) -> None:
    ctx = turn.ctx
    first, start = await open_stream(ctx, chunks)
    await send.send_all(start, _body(builder.start() + builder.add(first), last=False))
    try:
        async with aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                if events := builder.add(chunk):
                    await send(_body(events, last=False))
        if builder.finish_reason is None:
            raise unfinished(ctx)
        events = builder.finish()
        await _keep(turn, builder, store)
    except APIError as e:
        events = builder.fail(e)
    except Exception as e:  # noqa: BLE001 - the status is already sent; tell the client in-band
        log.exception("response stream failed mid-way")
        events = builder.fail(APIError(500, f"stream failed: {type(e).__name__}"))
    await send(_body(events, last=True))


async def _keep(turn: ResponseTurn, builder: ResponseBuilder, store: ResponseStore) -> None:
    """Store the finished response when the request asked for it."""
    if turn.request.store:
        await store.put(turn.ctx.tenant, StoredResponse(
            response=builder.response, input_items=turn.input_items, session=turn.session))


def _body(events: list[ResponseEvent], *, last: bool) -> dict:
    return {"type": "http.response.body", "body": b"".join(e.sse() for e in events),
            "more_body": not last}
