"""Folding chunks into the non-streaming response and the cacheable `Answer`."""

from __future__ import annotations

from engine.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    CompletionChoice,
    DeltaMessage,
    FunctionCall,
    ToolCall,
    Usage,
)
from gateway.assemble import Assembler, as_chunk


def chat(delta: DeltaMessage, finish=None, usage=None, choices=True) -> ChatCompletionChunk:
    return ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", usage=usage,
                               choices=[ChunkChoice(delta=delta, finish_reason=finish)]
                               if choices else [])


def test_chat_chunks_fold_into_completion_and_answer():
    a = Assembler("chat", "m")
    a.add(chat(DeltaMessage(role="assistant", content="")))
    a.add(chat(DeltaMessage(content="Hel")))
    a.add(chat(DeltaMessage(content="lo")))
    a.add(chat(DeltaMessage(), "stop"))
    a.add(chat(DeltaMessage(), usage=Usage.of(10, 2, 8), choices=False))
    response = a.response()
    assert response.id == "chatcmpl-1" and response.created == 7
    assert response.choices[0].message.content == "Hello"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens_details.cached_tokens == 8
    answer = a.answer()
    assert answer.content == "Hello" and answer.cacheable() and answer.usage.total_tokens == 12


def test_unfinished_or_length_answers_are_not_cacheable():
    a = Assembler("chat", "m")
    a.add(chat(DeltaMessage(content="x")))
    assert a.answer() is None
    a.add(chat(DeltaMessage(), "length"))
    assert not a.answer().cacheable()


def test_tool_call_deltas_are_merged():
    a = Assembler("chat", "m")
    a.add(chat(DeltaMessage(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                         "function": {"name": "get_", "arguments": '{"ci'}}])))
    a.add(chat(DeltaMessage(tool_calls=[{"index": 0, "function": {"name": "weather",
                                                                  "arguments": 'ty": 1}'}}]),
               "tool_calls"))
    (call,) = a.answer().tool_calls
    assert call.id == "call_1" and call.function.name == "get_weather"
    assert call.function.arguments == '{"city": 1}'


def test_completion_chunks():
    a = Assembler("completion", "m")
    for text, finish in (("Par", None), ("is", "stop")):
        a.add(Completion(id="cmpl-1", model="m",
                         choices=[CompletionChoice(text=text, finish_reason=finish)]))
    response = a.response()
    assert response.object == "text_completion" and response.choices[0].text == "Paris"
    assert a.answer().kind == "completion"


def test_a_whole_answer_as_one_chunk_folds_back_unchanged():
    calls = [ToolCall(id="call_a", function=FunctionCall(name="f", arguments='{"x": 1}')),
             ToolCall(id="call_b", function=FunctionCall(name="g", arguments="{}"))]
    whole = ChatCompletion(
        id="chatcmpl-9", created=11, model="m", usage=Usage.of(20, 4, 16),
        choices=[ChatChoice(message=AssistantMessage(content="Hi", tool_calls=calls),
                            finish_reason="tool_calls")])
    chunk = as_chunk(whole)
    assert chunk.choices[0].delta.role == "assistant" and chunk.usage == whole.usage
    a = Assembler("chat", "m")
    a.add(chunk)
    assert a.response().model_dump() == whole.model_dump()
    empty = ChatCompletion(id="chatcmpl-0", model="m", choices=[])
    assert as_chunk(empty).choices == []
