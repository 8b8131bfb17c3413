"""Engine deltas in, OpenAI chunks out, for chat and legacy completions, built from
`(choice index, delta)` pairs (`engine.serving.choices`); a whole answer is these chunks
folded (`openai_api.assemble`).

Pure functions with no web framework (the requests: `engine/serving/inputs.py`). Each
prompt's usage counts once; log-probabilities travel in the chunk that carries their text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

from engine.logprobs import chat_logprobs, completion_logprobs
from engine.serving.choices import IndexedDelta
from openai_api import (
    APIError,
    ChatCompletionChunk,
    Chunk,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    DeltaMessage,
    Kind,
    Usage,
    WholeAnswer,
    new_id,
    now,
)
from openai_api.assemble import Assembler

if TYPE_CHECKING:
    from engine.outputs import GenerationDelta, TokenLogprobs


def aborted(delta: GenerationDelta | None) -> APIError:
    """The error for a request the engine failed (a step error, or shutdown)."""
    reason = (delta.error if delta is not None else None) or "no finish reason"
    return APIError(500, f"the engine aborted the request: {reason}", code="engine_aborted")


def usage_of(lasts: dict[int, GenerationDelta], n: int) -> Usage:
    """Usage from each choice's latest delta (their counters are cumulative): each prompt
    counted once, as the client sent it once (by its first choice of `n`), and the
    completions of all choices."""
    firsts = [delta for index, delta in lasts.items() if index % n == 0]
    return Usage.of(sum(d.prompt_tokens for d in firsts),
                    sum(d.completion_tokens for d in lasts.values()),
                    sum(d.cached_tokens for d in firsts))


async def stream_chat(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                      include_usage: bool = False,
                      completion_id: str | None = None) -> AsyncIterator[ChatCompletionChunk]:
    """chat.completion.chunk objects, one choice each: per choice the role first, then text,
    then the finish reason; with `include_usage`, a last chunk with no choices and the usage
    (as OpenAI does). An engine failure mid-stream raises `aborted(...)`."""
    cid, created = completion_id or new_id("chatcmpl"), now()

    def chunk(index: int, delta: DeltaMessage, finish: str | None = None,
              logprobs: list[TokenLogprobs] | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(index=index, delta=delta, finish_reason=finish,
                             logprobs=chat_logprobs(logprobs) if logprobs else None)
        return ChatCompletionChunk(id=cid, created=created, model=model, choices=[choice])

    lasts: dict[int, GenerationDelta] = {}
    pending: dict[int, list[TokenLogprobs]] = {}  # tokens whose text is held back so far
    async for index, delta in deltas:
        if delta.finish_reason == "abort":
            raise aborted(delta)
        if index not in lasts:
            yield chunk(index, DeltaMessage(role="assistant", content=""))
        lasts[index] = delta
        if delta.logprobs:
            pending.setdefault(index, []).extend(delta.logprobs)
        if delta.text or delta.finish_reason:
            yield chunk(index, DeltaMessage(content=delta.text or None), delta.finish_reason,
                        pending.pop(index, None))
    if include_usage and lasts:
        yield ChatCompletionChunk(id=cid, created=created, model=model, choices=[],
                                  usage=usage_of(lasts, n))


async def stream_completion(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                            include_usage: bool = False, echoes: Sequence[str] = (),
                            completion_id: str | None = None) -> AsyncIterator[Completion]:
    """text_completion chunks, one choice each (a choice's echoed prompt first: `echoes`
    by index); usage last when asked."""
    cid, created = completion_id or new_id("cmpl"), now()

    def chunk(index: int, text: str, finish: str | None = None,
              logprobs: CompletionLogprobs | None = None) -> Completion:
        choice = CompletionChoice(index=index, text=text, finish_reason=finish,
                                  logprobs=logprobs)
        return Completion(id=cid, created=created, model=model, choices=[choice])

    lasts: dict[int, GenerationDelta] = {}
    pending: dict[int, list[TokenLogprobs]] = {}  # tokens whose text is held back so far
    offsets: dict[int, int] = {}  # where each choice's next token starts in its text
    async for index, delta in deltas:
        if delta.finish_reason == "abort":
            raise aborted(delta)
        text = delta.text
        if index not in lasts:  # the choice's first delta: its echoed prompt goes first
            echo = echoes[index] if echoes else ""
            text, offsets[index] = echo + text, len(echo)
        lasts[index] = delta
        if delta.logprobs:
            pending.setdefault(index, []).extend(delta.logprobs)
        if text or delta.finish_reason:
            tokens = pending.pop(index, None)
            logprobs = None
            if tokens:
                logprobs = completion_logprobs(tokens, offsets[index])
                offsets[index] += sum(len(t.token) for t in tokens)
            yield chunk(index, text, delta.finish_reason, logprobs)
    if include_usage and lasts:
        yield Completion(id=cid, created=created, model=model, choices=[],
                         usage=usage_of(lasts, n))


async def fold(chunks: AsyncIterator[Chunk], kind: Kind, model: str) -> WholeAnswer:
    """One non-streamed answer from the whole stream of chunks (asked with usage); every
    choice must have finished."""
    assembler = Assembler(kind, model)
    async with aclosing(chunks):
        async for chunk in chunks:
            assembler.add(chunk)
    if assembler.finish_reason is None:
        raise aborted(None)
    return assembler.response()
