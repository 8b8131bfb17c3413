"""engine/openai_adapter.py: OpenAI requests -> engine inputs, engine deltas -> OpenAI objects.

Uses the real SmolLM2 tokenizer (the session fixture shared with the other engine tests).
"""

from __future__ import annotations

import pytest

from engine.openai_adapter import (
    chat_input,
    collect_chat,
    collect_completion,
    completion_input,
    message_dict,
    stream_chat,
    stream_completion,
)
from engine.outputs import GenerationDelta, TokenLogprobs
from engine.protocol import APIError, ChatCompletionRequest, ChatMessage, CompletionRequest

MODEL = "smollm2-135m-instruct"
CTX = 8192


@pytest.fixture(scope="module")
def tokenizer(smollm_tokenizer):
    return smollm_tokenizer


def chat(**fields) -> ChatCompletionRequest:
    fields.setdefault("messages", [{"role": "user", "content": "What is the capital of France?"}])
    return ChatCompletionRequest(model=MODEL, **fields)


def delta_list(texts: list[str], finish: str | None = "stop", prompt: int = 10,
               cached: int = 4, error: str | None = None, index: int = 0):
    """One choice's deltas, tagged with its index as `engine.choices` hands them on."""
    out = []
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        out.append((index, GenerationDelta(
            request_id=f"r1-{index}", text=text, token_ids=[i], prompt_tokens=prompt,
            finish_reason=finish if last else None, cached_tokens=cached,
            completion_tokens=i + 1, error=error if last else None)))
    return out


async def indexed(items):
    for item in items:
        yield item


def deltas(texts: list[str], **kwargs):
    return indexed(delta_list(texts, **kwargs))


def two_choices():
    """Choice 0 ("Hi!", 2 tokens, cached 4) and choice 1 ("Yo", 1 token, cached 10),
    their deltas interleaved as two engine requests produce them."""
    first = delta_list(["Hi", "!"], index=0)
    second = delta_list(["Yo"], index=1, cached=10, finish="length")
    return indexed([first[0], second[0], first[1]])


# ---------------------------------------------------------------- requests


def test_message_dict_maps_developer_to_system_and_joins_text_parts():
    msg = ChatMessage(role="developer", content=[{"type": "text", "text": "Be "},
                                                 {"type": "text", "text": "brief."}])
    assert message_dict(msg) == {"role": "system", "content": "Be brief."}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = message_dict(ChatMessage(role="assistant", content=None, tool_calls=[call]))
    assert out["tool_calls"] == [call] and out["content"] == ""


def test_chat_input_renders_the_template_and_defaults_max_tokens_to_the_room_left(tokenizer):
    (prepared,) = chat_input(chat(), tokenizer, CTX).prompts
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}])
    assert prepared.ids == tokenizer.encode(text)
    assert tokenizer.decode(prepared.ids, skip_special_tokens=False).endswith(
        "<|im_start|>assistant\n")
    p = prepared.params
    assert p.max_tokens == CTX - len(prepared.ids)
    assert (p.temperature, p.top_p, p.top_k, p.stop) == (1.0, 1.0, -1, [])


def test_chat_input_carries_every_sampling_field(tokenizer):
    request = chat(max_completion_tokens=7, temperature=0.0, top_p=0.5, top_k=20, seed=3,
                   stop="\n", presence_penalty=0.5, frequency_penalty=-0.5,
                   stop_token_ids=[2], ignore_eos=True)
    p = chat_input(request, tokenizer, CTX).prompts[0].params
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed) == (7, 0.0, 0.5, 20, 3)
    assert (p.stop, p.stop_token_ids, p.ignore_eos) == (["\n"], [2], True)
    assert (p.presence_penalty, p.frequency_penalty) == (0.5, -0.5)


def test_chat_input_passes_tools_to_the_template(tokenizer):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    prepared = chat_input(chat(messages=messages, tools=tools), tokenizer, CTX)
    expected = tokenizer.apply_chat_template(messages, tools=tools)
    assert prepared.prompts[0].ids == tokenizer.encode(expected)


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"max_tokens": CTX}, "max_tokens", "context_length_exceeded"),
    ({"messages": [{"role": "user", "content": "word " * 9000}]}, "messages",
     "context_length_exceeded"),
    ({"stop": [""]}, "stop", None),
    ({"stop_token_ids": "2"}, "stop_token_ids", None),
    ({"top_logprobs": 2}, "top_logprobs", None),
])
def test_chat_input_rejects_bad_requests_with_400_naming_the_field(tokenizer, fields, param,
                                                                    code):
    with pytest.raises(APIError) as info:
        chat_input(chat(**fields), tokenizer, CTX)
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)


def test_completion_input_from_text_ids_and_echo(tokenizer):
    (prepared,) = completion_input(CompletionRequest(model=MODEL, prompt="Once upon a time",
                                                     echo=True, max_tokens=5),
                                   tokenizer, CTX).prompts
    assert prepared.ids == tokenizer.encode("Once upon a time")
    assert prepared.echo_text == "Once upon a time" and prepared.params.max_tokens == 5
    ids = tokenizer.encode("Hello world")
    (by_ids,) = completion_input(CompletionRequest(model=MODEL, prompt=ids, echo=True),
                                 tokenizer, CTX).prompts
    assert by_ids.ids == ids and by_ids.echo_text == "Hello world"


def test_completion_input_takes_a_batch_of_prompts_each_with_its_own_room(tokenizer):
    ids = tokenizer.encode("Hello world")
    request = CompletionRequest(model=MODEL, prompt=["Once upon a time", "Hi"], n=2, echo=True)
    prepared = completion_input(request, tokenizer, CTX)
    assert [p.ids for p in prepared.prompts] == [tokenizer.encode("Once upon a time"),
                                                 tokenizer.encode("Hi")]
    assert [p.params.max_tokens for p in prepared.prompts] == [
        CTX - len(p.ids) for p in prepared.prompts]
    assert prepared.echoes() == ["Once upon a time"] * 2 + ["Hi"] * 2  # by choice index
    by_ids = completion_input(CompletionRequest(model=MODEL, prompt=[ids, ids[:1]]),
                              tokenizer, CTX)
    assert [p.ids for p in by_ids.prompts] == [ids, ids[:1]]
    with pytest.raises(APIError) as info:
        completion_input(CompletionRequest(model=MODEL, prompt=["fine", ""]), tokenizer, CTX)
    assert (info.value.status, info.value.param) == (400, "prompt[1]")


@pytest.mark.parametrize(("prompt", "extra", "param"), [
    ("", {}, "prompt"),
    ([1, 2, 10**7], {}, "prompt"),
    ("hi", {"suffix": "end"}, "suffix"),
    ("hi", {"echo": True, "logprobs": 1}, "logprobs"),
    ("hi " * 9000, {}, "prompt"),
])
def test_completion_input_rejects_bad_prompts(tokenizer, prompt, extra, param):
    with pytest.raises(APIError) as info:
        completion_input(CompletionRequest(model=MODEL, prompt=prompt, **extra), tokenizer, CTX)
    assert (info.value.status, info.value.param) == (400, param)


# ---------------------------------------------------------------- answers


async def test_stream_chat_sends_role_then_text_then_finish_then_usage():
    chunks = [c async for c in stream_chat(deltas(["Hel", "", "lo"]), model=MODEL, n=1,
                                           include_usage=True, completion_id="chatcmpl-x")]
    assert [c.choices[0].delta.role for c in chunks[:1]] == ["assistant"]
    assert [c.choices[0].delta.content for c in chunks[1:-1]] == ["Hel", "lo"]
    assert [c.choices[0].finish_reason for c in chunks[1:-1]] == [None, "stop"]
    assert {c.id for c in chunks} == {"chatcmpl-x"} and {c.model for c in chunks} == {MODEL}
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.prompt_tokens == 10
    assert usage_chunk.usage.completion_tokens == 3 and usage_chunk.usage.total_tokens == 13
    assert usage_chunk.usage.prompt_tokens_details.cached_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])


async def test_stream_chat_without_usage_ends_on_the_finish_chunk():
    chunks = [c async for c in stream_chat(deltas(["a", "b"], finish="length"), model=MODEL,
                                           n=1)]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)


async def test_collect_chat_joins_the_text_and_reports_usage():
    answer = await collect_chat(deltas(["The capital", " is Paris."]), model=MODEL, n=1)
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert answer.choices[0].message.content == "The capital is Paris."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens_details.cached_tokens == 4


async def test_collect_chat_turns_an_engine_abort_into_an_error():
    with pytest.raises(APIError) as info:
        await collect_chat(deltas(["x"], finish="abort", error="boom"), model=MODEL, n=1)
    assert info.value.status == 500 and "boom" in info.value.message


async def test_streams_raise_when_the_engine_fails_mid_answer():
    with pytest.raises(APIError) as info:
        [c async for c in stream_chat(deltas(["a", ""], finish="abort", error="oom"),
                                      model=MODEL, n=1)]
    assert info.value.status == 500 and info.value.code == "engine_aborted"
    with pytest.raises(APIError):
        [c async for c in stream_completion(deltas(["a"], finish="abort"), model=MODEL, n=1)]


async def test_stream_completion_sends_the_echo_first_and_usage_last():
    chunks = [c async for c in stream_completion(deltas([" there", "!"]), model=MODEL, n=1,
                                                 include_usage=True, echoes=["Hi"])]
    assert [c.choices[0].text for c in chunks[:-1]] == ["Hi there", "!"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    assert {c.object for c in chunks} == {"text_completion"}


async def test_collect_completion_prepends_the_echo():
    answer = await collect_completion(deltas([" there"]), model=MODEL, n=1, echoes=["Hi"])
    assert answer.choices[0].text == "Hi there" and answer.choices[0].finish_reason == "stop"
    assert answer.usage.total_tokens == 11


async def test_stream_chat_streams_each_choice_under_its_index():
    chunks = [c async for c in stream_chat(two_choices(), model=MODEL, n=2,
                                           include_usage=True)]
    assert [(c.choices[0].index, c.choices[0].delta.role, c.choices[0].delta.content,
             c.choices[0].finish_reason) for c in chunks[:-1]] == [
        (0, "assistant", "", None), (0, None, "Hi", None),
        (1, "assistant", "", None), (1, None, "Yo", "length"),
        (0, None, "!", "stop")]
    usage = chunks[-1].usage
    # the prompt counts once (the client sent it once); completions add up
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 3, 13)
    assert usage.prompt_tokens_details.cached_tokens == 4  # choice 0's


async def test_collect_chat_and_completion_return_every_choice_in_index_order():
    answer = await collect_chat(two_choices(), model=MODEL, n=2)
    assert [(c.index, c.message.content, c.finish_reason) for c in answer.choices] == [
        (0, "Hi!", "stop"), (1, "Yo", "length")]
    assert answer.usage.completion_tokens == 3
    text = await collect_completion(two_choices(), model=MODEL, n=2, echoes=["> ", "> "])
    assert [(c.index, c.text) for c in text.choices] == [(0, "> Hi!"), (1, "> Yo")]


async def test_stream_completion_echoes_the_prompt_once_per_choice():
    chunks = [c async for c in stream_completion(two_choices(), model=MODEL, n=2,
                                                 echoes=["> ", "> "])]
    assert [(c.choices[0].index, c.choices[0].text) for c in chunks] == [
        (0, "> Hi"), (1, "> Yo"), (0, "!")]


async def test_collect_fails_when_any_choice_is_cut_off():
    unfinished = indexed(delta_list(["a"], index=0) + delta_list(["b"], index=1, finish=None))
    with pytest.raises(APIError) as info:
        await collect_chat(unfinished, model=MODEL, n=2)
    assert info.value.status == 500 and info.value.code == "engine_aborted"


async def test_a_batch_counts_each_prompt_once_and_echoes_its_own_prompt():
    # two prompts (10 and 6 tokens), two choices each: indexes 0-1 and 2-3
    batch = indexed(delta_list(["a"], index=0) + delta_list(["b"], index=1)
                    + delta_list(["c"], index=2, prompt=6, cached=0)
                    + delta_list(["d"], index=3, prompt=6, cached=0))
    answer = await collect_completion(batch, model=MODEL, n=2,
                                      echoes=["P0:", "P0:", "P1:", "P1:"])
    assert [c.text for c in answer.choices] == ["P0:a", "P0:b", "P1:c", "P1:d"]
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (16, 4)
    assert answer.usage.prompt_tokens_details.cached_tokens == 4


def scored(text: str, logprob: float) -> TokenLogprobs:
    return TokenLogprobs(text, text.encode(), logprob, [(text, text.encode(), logprob)])


async def test_logprobs_travel_with_the_text_they_score():
    first, second, third = delta_list(["", "Hi", "!"])  # the first token's text held back
    for (_, delta), text, lp in zip((first, second, third), ["H", "i", "!"], [-0.1, -0.2, -0.3],
                                    strict=True):
        delta.logprobs = [scored(text, lp)]
    chunks = [c async for c in stream_chat(indexed([first, second, third]), model=MODEL, n=1)]
    scores = [[(e.token, e.logprob) for e in c.choices[0].logprobs.content]
              if c.choices[0].logprobs else None for c in chunks]
    assert scores == [None, [("H", -0.1), ("i", -0.2)], [("!", -0.3)]]
    assert chunks[1].choices[0].logprobs.content[0].top_logprobs[0].bytes == [72]
    answer = await collect_completion(indexed([first, second, third]), model=MODEL, n=1)
    assert answer.choices[0].logprobs.tokens == ["H", "i", "!"]
    assert answer.choices[0].logprobs.text_offset == [0, 1, 2]
    streamed = [c async for c in stream_completion(indexed([first, second, third]),
                                                   model=MODEL, n=1)]
    assert [c.choices[0].logprobs.text_offset for c in streamed] == [[0, 1], [2]]
    assert streamed[1].choices[0].logprobs.top_logprobs == [{"!": -0.3}]
