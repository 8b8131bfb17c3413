"""A cached answer replays as several chunks that fold back into the same answer."""

from __future__ import annotations

from gateway.context import Answer
from gateway.replay import pieces, replay
from openai_api import ChatCompletionChunk, ChunkChoice, DeltaMessage, FunctionCall, ToolCall, Usage
from openai_api.assemble import Assembler


def test_pieces_keep_every_character():
    text = "The quick brown fox jumps over the lazy dog.\n  Twice, maybe thrice!"
    parts = list(pieces(text, size=10))
    assert "".join(parts) == text and len(parts) > 3


async def test_chat_replay_round_trips():
    answer = Answer(kind="chat", model="m", content="word " * 30, finish_reason="stop",
                    usage=Usage.of(20, 30, 5))
    chunks = [c async for c in replay(answer, "client-model")]
    assert len(chunks) > 4
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].model == "client-model"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30
    folded = Assembler("chat", "m")
    for c in chunks:
        folded.add(c)
    assert Answer.folded(folded) == answer


async def test_tool_calls_and_completions_replay():
    call = ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))
    answer = Answer(kind="chat", model="m", content="", finish_reason="tool_calls",
                    tool_calls=[call])
    folded = Assembler("chat", "m")
    async for c in replay(answer, "m"):
        folded.add(c)
    assert Answer.folded(folded).tool_calls == [call]
    text = Answer(kind="completion", model="m", content="Paris is the capital.",
                  finish_reason="stop")
    folded = Assembler("completion", "m")
    async for c in replay(text, "m"):
        assert c.object == "text_completion"
        folded.add(c)
    assert Answer.folded(folded) == text


async def test_unsplit_replay_is_one_text_chunk():
    answer = Answer(kind="chat", model="m", content="word " * 30, finish_reason="stop",
                    usage=Usage.of(20, 30, 5))
    chunks = [c async for c in replay(answer, "m", split=False)]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == [answer.content]
    folded = Assembler("chat", "m")
    for c in chunks:
        folded.add(c)
    assert Answer.folded(folded) == answer


def test_unfinished_or_length_answers_are_not_cacheable():
    folded = Assembler("chat", "m")
    folded.add(ChatCompletionChunk(id="c", model="m", choices=[
        ChunkChoice(delta=DeltaMessage(content="x"))]))
    assert Answer.folded(folded) is None
    folded.add(ChatCompletionChunk(id="c", model="m", choices=[
        ChunkChoice(delta=DeltaMessage(), finish_reason="length")]))
    assert not Answer.folded(folded).cacheable()
