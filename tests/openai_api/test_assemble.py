"""openai_api/assemble.py: folding chunks into the non-streaming response and the one
choice the caches keep."""

from __future__ import annotations

from openai_api import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    DeltaMessage,
    FunctionCall,
    TokenLogprob,
    ToolCall,
    Usage,
)
from openai_api.assemble import Assembler, as_chunk


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
    choice = a.only_choice()
    assert (choice.content, choice.finish_reason) == ("Hello", "stop")
    assert a.usage.total_tokens == 12


def test_an_unfinished_answer_has_no_choice_yet():
    a = Assembler("chat", "m")
    a.add(chat(DeltaMessage(content="x")))
    assert a.only_choice() is None
    a.add(chat(DeltaMessage(), "length"))
    assert a.only_choice().finish_reason == "length"


def test_tool_call_deltas_are_merged():
    a = Assembler("chat", "m")
    a.add(chat(DeltaMessage(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                         "function": {"name": "get_", "arguments": '{"ci'}}])))
    a.add(chat(DeltaMessage(tool_calls=[{"index": 0, "function": {"name": "weather",
                                                                  "arguments": 'ty": 1}'}}]),
               "tool_calls"))
    (call,) = a.only_choice().tool_calls
    assert call.id == "call_1" and call.function.name == "get_weather"
    assert call.function.arguments == '{"city": 1}'


def test_completion_chunks():
    a = Assembler("completion", "m")
    for text, finish in (("Par", None), ("is", "stop")):
        a.add(Completion(id="cmpl-1", model="m",
                         choices=[CompletionChoice(text=text, finish_reason=finish)]))
    response = a.response()
    assert response.object == "text_completion" and response.choices[0].text == "Paris"
    assert a.only_choice().content == "Paris"


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


def one(index: int, content: str | None = None, finish=None, logprobs=None) -> ChatCompletionChunk:
    choice = ChunkChoice(index=index, delta=DeltaMessage(content=content), finish_reason=finish,
                         logprobs=logprobs)
    return ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", choices=[choice])


def scores(*tokens: str) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=[TokenLogprob(token=t, logprob=-1.0) for t in tokens])


def test_choices_fold_side_by_side_with_their_logprobs():
    a = Assembler("chat", "m")
    a.add(one(1, "Yo", logprobs=scores("Yo")))
    a.add(one(0, "Hi", logprobs=scores("H", "i")))
    a.add(one(1, None, "length"))
    assert a.finish_reason is None  # choice 0 is still running
    a.add(one(0, "!", "stop", logprobs=scores("!")))
    assert a.finish_reason == "stop"
    response = a.response()
    assert [(c.index, c.message.content, c.finish_reason) for c in response.choices] == [
        (0, "Hi!", "stop"), (1, "Yo", "length")]
    assert [[e.token for e in c.logprobs.content] for c in response.choices] == [
        ["H", "i", "!"], ["Yo"]]
    assert a.only_choice() is None  # the caches keep one choice
    back = Assembler("chat", "m")
    back.add(as_chunk(response))  # a whole answer as one chunk folds back into itself
    assert back.response().choices == response.choices


def test_completion_logprobs_concatenate():
    a = Assembler("completion", "m")
    for text, offset in (("Hel", 0), ("lo", 3)):
        lp = CompletionLogprobs(tokens=[text], token_logprobs=[-0.5], top_logprobs=[{text: -0.5}],
                                text_offset=[offset])
        a.add(Completion(id="c", created=1, model="m",
                         choices=[CompletionChoice(text=text, logprobs=lp)]))
    lp = a.response().choices[0].logprobs
    assert (lp.tokens, lp.text_offset, lp.top_logprobs) == (
        ["Hel", "lo"], [0, 3], [{"Hel": -0.5}, {"lo": -0.5}])
