"""The `litellm` upstream for real: `litellm.acompletion` against a `headstart engine`
subprocess (provider string `openai/...` with an api_base), through the gateway."""

from __future__ import annotations


def test_chat_through_litellm(client):
    raw = client.chat.completions.with_raw_response.create(
        model="litellm", messages=[{"role": "user", "content": "Say hello."}], max_tokens=5,
        temperature=0)
    r = raw.parse()
    assert raw.headers["x-headstart-upstream"] == "vialitellm"
    assert r.model == "litellm" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0


def test_streaming_chat_through_litellm(client):
    chunks = list(client.chat.completions.create(
        model="litellm", messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_completion_through_litellm(client):
    r = client.completions.create(model="litellm", prompt="The sky is", max_tokens=4,
                                  temperature=0)
    assert r.choices[0].text
