"""SSE framing: one `data:` frame per chunk, `[DONE]` last; a mid-stream error becomes an
error frame; closing the SSE stream closes the chunk source."""

from __future__ import annotations

import json

from engine.protocol import APIError, ChatCompletionChunk, ChunkChoice, DeltaMessage
from gateway.sse import DONE, SSEDataReader, sse_frames


def chunk(text: str) -> ChatCompletionChunk:
    return ChatCompletionChunk(id="c1", model="m",
                               choices=[ChunkChoice(delta=DeltaMessage(content=text))])


async def collect(frames) -> list[bytes]:
    return [f async for f in frames]


async def test_frames_end_with_done():
    async def chunks():
        yield chunk("a")
        yield chunk("b")

    frames = await collect(sse_frames(chunks()))
    assert frames[-1] == DONE == b"data: [DONE]\n\n"
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    texts = [json.loads(f[6:])["choices"][0]["delta"]["content"] for f in frames[:-1]]
    assert texts == ["a", "b"]


async def test_error_after_first_chunk_is_an_error_frame():
    async def chunks():
        yield chunk("a")
        raise APIError(504, "upstream 'x': too slow", code="upstream_timeout")

    frames = await collect(sse_frames(chunks()))
    assert len(frames) == 2 and DONE not in frames
    error = json.loads(frames[1][6:])["error"]
    assert error["message"] == "upstream 'x': too slow" and error["type"] == "timeout_error"


async def test_unexpected_exception_is_a_500_frame():
    async def chunks():
        yield chunk("a")
        raise KeyError("boom")

    frames = await collect(sse_frames(chunks()))
    assert json.loads(frames[-1][6:])["error"]["type"] == "server_error"


async def test_closing_the_stream_closes_the_source():
    closed = []

    async def chunks():
        try:
            for i in range(100):
                yield chunk(str(i))
        finally:
            closed.append(True)

    frames = sse_frames(chunks())
    await anext(frames)
    await frames.aclose()
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
