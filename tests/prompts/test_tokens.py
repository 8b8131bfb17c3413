"""Token counts equal the upstream's own tokenizer: the engine's template, tiktoken, litellm."""

from __future__ import annotations

import pytest

from engine.serving.inputs import chat_prompt
from openai_api import ChatCompletionRequest
from prompts.tokens import (
    EngineTokenCounter,
    LitellmTokenCounter,
    TiktokenCounter,
    bundled_encoding,
    counter_for,
    encoding_name_for,
    is_openai_family,
)

CHAT = [{"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "What is the capital of France? Also, héllo 👋 wörld."},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"}]


def test_engine_count_is_the_prompt_the_engine_sees(engine_tokenizer, engine_counter):
    request = ChatCompletionRequest(model="m", messages=CHAT)
    prompt = chat_prompt(request, engine_tokenizer)
    assert engine_counter.count_messages(CHAT) == len(engine_tokenizer.encode(prompt))
    # the template's frame is counted: more than the texts alone
    assert engine_counter.count_messages(CHAT) > sum(
        engine_counter.count_text(m["content"]) for m in CHAT) + 4 * len(CHAT)


def test_engine_count_includes_the_default_system_prompt(engine_counter):
    one = [{"role": "user", "content": "hi"}]
    with_system = [{"role": "system", "content": "S"}, *one]
    assert engine_counter.count_messages(one) > engine_counter.count_messages(with_system)


def test_tiktoken_matches_tiktoken_itself():
    import litellm.litellm_core_utils.default_encoding as litellm_default  # litellm's own load
    import tiktoken

    counter = TiktokenCounter("gpt-4")
    text = "Token counting must match tiktoken exactly, even for naïve café ☕ text. " * 20
    assert counter.count_text(text) == len(litellm_default.encoding.encode(text))
    o200k = TiktokenCounter("gpt-4o")
    assert o200k.encoding.name == "o200k_base"
    assert o200k.count_text(text) == len(tiktoken.get_encoding("o200k_base").encode(text))


def test_tiktoken_chat_rule_matches_openai_cookbook():
    # OpenAI's published count for this two-message example with gpt-3.5/4 is 3+3+3 + texts
    counter = TiktokenCounter("gpt-4")
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    texts = sum(counter.count_text(m["role"]) + counter.count_text(m["content"]) for m in msgs)
    assert counter.count_messages(msgs) == 3 + 3 * len(msgs) + texts


def test_unbundled_encoding_is_refused_not_fetched():
    with pytest.raises(KeyError):
        bundled_encoding("r50k_base")


def test_counter_routing():
    assert is_openai_family("gpt-4o-mini") and is_openai_family("openai/gpt-4")
    assert not is_openai_family("anthropic/claude-3-5-haiku-latest")
    assert encoding_name_for("gpt-4o-mini") == "o200k_base"
    assert encoding_name_for("gpt-3.5-turbo") == "cl100k_base"
    assert isinstance(counter_for("openai", "gpt-4o"), TiktokenCounter)
    assert isinstance(counter_for("litellm", "anthropic/claude-3-5-haiku-latest"),
                      LitellmTokenCounter)
    assert isinstance(counter_for("engine", "x", tokenizer=object()), EngineTokenCounter)


def test_litellm_counter_counts_messages():
    counter = LitellmTokenCounter("anthropic/claude-3-5-haiku-latest")
    short = counter.count_messages([{"role": "user", "content": "hi"}])
    long = counter.count_messages([{"role": "user", "content": "hi " * 100}])
    assert 0 < short < long
