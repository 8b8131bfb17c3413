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


def test_several_choices_through_litellm(client):
    chunks = list(client.chat.completions.create(
        model="litellm", messages=[{"role": "user", "content": "Name a bird."}],
        max_tokens=4, temperature=1.0, seed=2, n=2, stream=True,
        stream_options={"include_usage": True}))
    assert {choice.index for c in chunks for choice in c.choices} == {0, 1}
    finished = [choice.index for c in chunks for choice in c.choices if choice.finish_reason]
    assert sorted(finished) == [0, 1]
    assert chunks[-1].usage.completion_tokens >= 2


def test_several_completions_through_litellm(client):
    r = client.completions.create(model="litellm", prompt="A bird:", max_tokens=3,
                                  temperature=1.0, seed=2, n=2)
    assert [c.index for c in r.choices] == [0, 1] and all(c.text for c in r.choices)
    assert all(c.finish_reason in ("stop", "length") for c in r.choices)


def test_a_batch_of_prompts_through_litellm(client):
    chunks = list(client.completions.create(model="litellm", prompt=["A bird:", "A fish:"],
                                            max_tokens=3, temperature=0, stream=True))
    assert {choice.index for c in chunks for choice in c.choices} == {0, 1}


def test_logprobs_through_litellm(client):
    r = client.chat.completions.create(
        model="litellm", messages=[{"role": "user", "content": "Say hello."}], max_tokens=3,
        temperature=0, logprobs=True, top_logprobs=2)
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens and all(e.logprob <= 0 for e in entries)
