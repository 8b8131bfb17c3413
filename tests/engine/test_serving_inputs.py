"""engine/serving/inputs.py: OpenAI requests -> engine inputs.

Uses the real SmolLM2 tokenizer (the session fixture shared with the other engine tests).
"""

from __future__ import annotations

import pytest

from engine.serving.inputs import chat_input, completion_input
from openai_api import APIError, ChatCompletionRequest, CompletionRequest

MODEL = "smollm2-135m-instruct"
CTX = 8192


@pytest.fixture(scope="module")
def tokenizer(smollm_tokenizer):
    return smollm_tokenizer


def chat(**fields) -> ChatCompletionRequest:
    fields.setdefault("messages", [{"role": "user", "content": "What is the capital of France?"}])
    return ChatCompletionRequest(model=MODEL, **fields)


# ---------------------------------------------------------------- requests


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


def test_chat_input_lists_tools_in_the_system_prompt_of_a_template_without_them(tokenizer):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    prepared = chat_input(chat(messages=messages, tools=tools), tokenizer, CTX)
    text = tokenizer.decode(prepared.prompts[0].ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou can call these functions")
    assert '"name": "get_weather"' in text and prepared.tool_stream is not None


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
