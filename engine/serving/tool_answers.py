"""Chat chunks with the text of tool calls turned into OpenAI's tool-call deltas.

`answers.stream_chat` writes each choice's text as content; where the request offers tools
this reads each choice's text through its own `ToolCallStream` and rewrites the chunks:
content that is text stays content, calls become `delta.tool_calls` entries (index, id
and name first, then the arguments in pieces), and a choice that called a tool ends with
`finish_reason: tool_calls` (a cut-off one keeps `length`). Log-probabilities of text held
back ride on the next chunk that goes out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from engine.serving.tool_stream import ToolCallStream
from openai_api import ChatCompletionChunk, ChoiceLogprobs, ChunkChoice, DeltaMessage


def merge_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per call index (a header and an arguments piece of one call merged)."""
    merged: dict[int, dict[str, Any]] = {}
    for call in calls:
        slot = merged.get(call["index"])
        if slot is None:
            merged[call["index"]] = {**call, "function": dict(call["function"])}
        else:
            fn = slot["function"]
            fn["arguments"] = fn.get("arguments", "") + call["function"].get("arguments", "")
    return list(merged.values())


async def with_tool_calls(chunks: AsyncIterator[ChatCompletionChunk],
                          start: Callable[[], ToolCallStream],
                          ) -> AsyncIterator[ChatCompletionChunk]:
    """`chunks` (one choice each, as `stream_chat` writes them) with calls parsed out."""
    streams: dict[int, ToolCallStream] = {}
    held: dict[int, list[Any]] = {}  # log-probabilities of text not sent yet
    async with aclosing(chunks):
        async for chunk in chunks:
            choices = []
            for choice in chunk.choices:
                stream = streams.get(choice.index)
                if stream is None:
                    stream = streams[choice.index] = start()
                if choice.logprobs is not None and choice.logprobs.content:
                    held.setdefault(choice.index, []).extend(choice.logprobs.content)
                delta = choice.delta
                events = stream.feed(delta.content or "")
                finish = choice.finish_reason
                if finish is not None:
                    events.add(stream.finish())
                    if stream.called and finish == "stop":
                        finish = "tool_calls"
                if not (events or finish or delta.role):
                    continue
                tokens = held.pop(choice.index, None)
                choices.append(ChunkChoice(
                    index=choice.index, finish_reason=finish,
                    delta=DeltaMessage(role=delta.role, content=events.content or
                                       ("" if delta.role else None),
                                       tool_calls=merge_calls(events.calls) or None),
                    logprobs=ChoiceLogprobs(content=tokens) if tokens else None))
            if choices or not chunk.choices:
                yield chunk.model_copy(update={"choices": choices})
