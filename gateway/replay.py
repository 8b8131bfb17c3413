"""A cached `Answer` played back as chunks, in several pieces like a live answer, so
clients cannot tell a hit from a miss by the stream's shape (only by `x-cache`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

from gateway.context import Answer
from openai_api import (
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    CompletionChoice,
    DeltaMessage,
    new_id,
    now,
)

PIECE_CHARS = 24  # roughly what a few tokens of a live stream carry
_WORDS = re.compile(r"\S+\s*|\s+")


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` split on word boundaries into pieces of about `size` characters."""
    piece = ""
    for word in _WORDS.findall(text):
        piece += word
        if len(piece) >= size:
            yield piece
            piece = ""
    if piece:
        yield piece


async def replay(answer: Answer, model: str,
                 split: bool = True) -> AsyncIterator[ChatCompletionChunk | Completion]:
    """The answer's chunks; the last one carries the stored usage. `split=False` keeps the
    text in one chunk: for a client that gets one JSON object, pieces are only cost."""
    for chunk in replay_chunks(answer, model, split):
        yield chunk


def replay_chunks(answer: Answer, model: str,
                  split: bool = True) -> list[ChatCompletionChunk | Completion]:
    texts = list(pieces(answer.content)) if split else [answer.content] if answer.content else []
    created = now()
    if answer.kind == "completion":
        cid = new_id("cmpl")
        out: list[ChatCompletionChunk | Completion] = [
            Completion(id=cid, created=created, model=model,
                       choices=[CompletionChoice(text=p)]) for p in texts]
        out.append(Completion(id=cid, created=created, model=model,
                              choices=[CompletionChoice(text="", finish_reason=answer.finish_reason)]))
        out.append(Completion(id=cid, created=created, model=model, choices=[],
                              usage=answer.usage))
        return out
    cid = new_id("chatcmpl")

    def chunk(delta: DeltaMessage, finish: str | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=cid, created=created, model=model,
                                   choices=[ChunkChoice(delta=delta, finish_reason=finish)])

    out = [chunk(DeltaMessage(role="assistant", content=""))]
    out += [chunk(DeltaMessage(content=p)) for p in texts]
    if answer.tool_calls:
        calls = [{"index": i, "id": t.id, "type": "function",
                  "function": {"name": t.function.name, "arguments": t.function.arguments}}
                 for i, t in enumerate(answer.tool_calls)]
        out.append(chunk(DeltaMessage(tool_calls=calls)))
    out.append(chunk(DeltaMessage(), answer.finish_reason))
    out.append(ChatCompletionChunk(id=cid, created=created, model=model, choices=[],
                                   usage=answer.usage))
    return out
