"""Prompt transforms end to end: the official SDK → a live gateway → the in-process engine.

Checks what a client sees: `x-headstart-transforms`, merged decomposed answers streaming,
usage over every sub-call, and 413 for a conversation that cannot fit its route's window.
"""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import GatewayThread

CONFIG = {
    "upstreams": {"local": {"kind": "engine", "engine": {"kv_cache_memory_mb": 256}}},
    "routes": [
        {"name": "win", "models": ["win"], "upstream": "local",
         "window": {"max_input_tokens": 300}},
        {"name": "tight", "models": ["tight"], "upstream": "local",
         "window": {"max_input_tokens": 60}},
        {"name": "split", "models": ["split"], "upstream": "local",
         "decompose": {"enabled": True}},
        {"name": "split-cached", "models": ["split-cached"], "upstream": "local",
         "decompose": {"enabled": True}, "cache": {"exact": {"enabled": True}}},
        {"name": "squeeze", "models": ["squeeze"], "upstream": "local",
         "compress": {"enabled": True, "min_tokens": 300, "target_ratio": 0.3,
                      "embeddings": False, "prefill_tokens_per_s": 100}},
    ],
}


@pytest.fixture(scope="module")
def client():
    gateway = GatewayThread(CONFIG).start()
    yield openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="x", max_retries=0)
    gateway.stop()


def chat(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are brief."}]
    for t in range(turns):
        msgs += [{"role": "user", "content": f"Tell me fact {t} " + "please " * 20},
                 {"role": "assistant", "content": f"Fact {t} is " + "interesting " * 20}]
    return msgs + [{"role": "user", "content": "Thanks. Which fact was first?"}]


def test_window_header_and_budget(client):
    raw = client.chat.completions.with_raw_response.create(
        model="win", messages=chat(8), max_tokens=4, temperature=0)
    assert raw.headers["x-headstart-transforms"].startswith("window:dropped=")
    assert raw.parse().usage.prompt_tokens <= 300


def test_short_request_is_untouched(client):
    raw = client.chat.completions.with_raw_response.create(
        model="win", messages=chat(0), max_tokens=4, temperature=0)
    assert "x-headstart-transforms" not in raw.headers


def test_conversation_that_cannot_fit_is_413(client):
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="tight", messages=[
            {"role": "user", "content": "word " * 200}], max_tokens=4)
    assert info.value.status_code == 413
    assert "more than this route's input budget of 60 tokens" in info.value.body["message"]


def test_decomposed_answer_streams_in_order_with_summed_usage(client):
    question = "Answer briefly:\n1. What is 2 + 2?\n2. Name a colour of the sky."
    raw = client.chat.completions.with_raw_response.create(
        model="split", messages=[{"role": "user", "content": question}], max_tokens=8,
        temperature=0, stream=True, stream_options={"include_usage": True})
    assert raw.headers["x-headstart-transforms"] == "decompose:2"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("1. ") and "\n\n2. " in text
    usage = chunks[-1].usage
    single = client.chat.completions.create(
        model="win", messages=[{"role": "user", "content": "Answer briefly:\nWhat is 2 + 2?"}],
        max_tokens=8, temperature=0).usage
    assert usage.prompt_tokens > single.prompt_tokens  # both sub-calls counted


def test_compression_header(client):
    from prompts.quality import make_cases

    case = make_cases(1, paragraphs=30)[0]
    raw = client.chat.completions.with_raw_response.create(
        model="squeeze", messages=[{"role": "user", "content": f"{case.context}\n\n"
                                    f"{case.question}"}], max_tokens=4, temperature=0)
    assert raw.headers["x-headstart-transforms"].startswith("compress:0.")
    assert raw.parse().usage.prompt_tokens < 0.5 * len(case.context.split()) * 1.3


def test_decomposed_parts_go_through_the_cache(client):
    def ask(content: str):
        return client.chat.completions.with_raw_response.create(
            model="split-cached", messages=[{"role": "user", "content": content}],
            max_tokens=48, temperature=0, stop=["\n", ".", ","])

    first = ask("Answer briefly:\n1. What is 3 + 3?\n2. Name a yellow fruit.")
    assert first.headers["x-cache"] == "miss"
    assert "part-cache" not in first.headers["x-headstart-transforms"]
    # the same parts in another order: the whole request misses, each part is a hit
    swapped = ask("Answer briefly:\n1. Name a yellow fruit.\n2. What is 3 + 3?")
    assert swapped.headers["x-cache"] == "miss"
    tags = swapped.headers["x-headstart-transforms"].split(",")
    assert tags.count("part-cache:exact") == 2
    # a part asked on its own is the sub-request the decomposition sent: an exact hit
    alone = ask("Answer briefly:\nWhat is 3 + 3?")
    assert alone.headers["x-cache"] == "exact"
