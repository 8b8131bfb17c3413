"""SSE framing: one `data:` frame per chunk, `[DONE]` last; a mid-stream error becomes an
error frame; the usage-only chunk only when asked; leaving early closes the chunk source; a
chunk read off an upstream is written as it came until its JSON is dropped."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.coalesced_send import CoalescedSend
from gateway.sse import DONE, SSEDataReader, drop_wire, frame, keep_wire, write_sse
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    DeltaMessage,
    Usage,
)


def chunk(text: str) -> ChatCompletionChunk:
    return ChatCompletionChunk(id="c1", model="m",
                               choices=[ChunkChoice(delta=DeltaMessage(content=text))])


START = {"type": "http.response.start", "status": 200, "headers": []}


def usage_chunk() -> ChatCompletionChunk:
    return ChatCompletionChunk(id="c1", model="m", choices=[], usage=Usage.of(5, 2))


async def collect(chunks, include_usage: bool = True) -> list[tuple[bytes, bool]]:
    """(frame, last) pairs as written; the first chunk is taken apart, as the HTTP layer
    does before it answers."""
    written: list[tuple[bytes, bool]] = []

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body":
            written.append((message["body"], not message["more_body"]))

    first = await anext(chunks)
    await write_sse(first, chunks, include_usage, CoalescedSend(send), START)
    return written


async def test_frames_end_with_done():
    async def chunks():
        yield chunk("a")
        yield chunk("b")

    written = await collect(chunks())
    frames = [f for f, _ in written]
    assert frames[-1] == DONE == b"data: [DONE]\n\n"
    assert [last for _, last in written] == [False, False, True]
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    texts = [json.loads(f[6:])["choices"][0]["delta"]["content"] for f in frames[:-1]]
    assert texts == ["a", "b"]


async def test_usage_chunk_only_when_asked():
    async def chunks():
        yield chunk("a")
        yield usage_chunk()

    with_usage = [json.loads(f[6:]) for f, _ in (await collect(chunks()))[:-1]]
    assert with_usage[-1]["usage"]["prompt_tokens"] == 5 and with_usage[-1]["choices"] == []
    without = [json.loads(f[6:]) for f, _ in (await collect(chunks(), False))[:-1]]
    assert len(without) == 1 and without[0]["usage"] is None


async def test_error_after_first_chunk_is_an_error_frame():
    async def chunks():
        yield chunk("a")
        raise APIError(504, "upstream 'x': too slow", code="upstream_timeout")

    written = await collect(chunks())
    assert len(written) == 2 and written[1][1] and DONE not in [f for f, _ in written]
    error = json.loads(written[1][0][6:])["error"]
    assert error["message"] == "upstream 'x': too slow" and error["type"] == "timeout_error"


async def test_unexpected_exception_is_a_500_frame():
    async def chunks():
        yield chunk("a")
        raise KeyError("boom")

    written = await collect(chunks())
    assert json.loads(written[-1][0][6:])["error"]["type"] == "server_error"


async def test_leaving_early_closes_the_source():
    closed = []

    async def chunks():
        try:
            for i in range(100):
                yield chunk(str(i))
        finally:
            closed.append(True)

    async def send(message: dict) -> None:
        raise asyncio.CancelledError  # the client went away while a frame was written

    source = chunks()
    first = await anext(source)
    with pytest.raises(asyncio.CancelledError):
        await write_sse(first, source, True, CoalescedSend(send), START)
    assert closed == [True]


def test_reader_splits_arbitrary_pieces_and_stops_at_done():
    stream = (b'data: {"a": 1}\n\ndata: {"b": 2}\r\n\r\n: comment\n\nevent: x\ndata: {"c": 3}\n\n'
              b"data: [DONE]\n\ndata: {\"late\": 1}\n\n")
    for size in (1, 2, 7, len(stream)):
        reader = SSEDataReader()
        got = []
        for i in range(0, len(stream), size):
            got += reader.feed(stream[i:i + size])
        got += reader.end()
        assert got == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}'] and reader.done


def test_reader_keeps_a_last_line_without_newline():
    reader = SSEDataReader()
    assert reader.feed(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']
    assert reader.feed(b": 2}") == []
    assert reader.end() == [b'{"b": 2}'] and not reader.done


@pytest.mark.parametrize("model", [ChatCompletionChunk, Completion])
def test_a_kept_wire_is_written_as_it_came_until_dropped(model):
    assert not model.__private_attributes__  # `keep_wire` uses the slot they leave empty
    payload = (b'{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}'
               if model is ChatCompletionChunk else
               b'{"id":"c1","model":"m","choices":[{"index":0,"text":"hi"}]}')
    kept = keep_wire(model.model_validate_json(payload), payload)
    assert frame(kept) == b"data: " + payload + b"\n\n"  # no spaces, fields as sent
    drop_wire(kept)
    rendered = frame(kept)
    assert rendered != b"data: " + payload + b"\n\n"
    assert json.loads(rendered[6:]) == kept.model_dump(mode="json")
