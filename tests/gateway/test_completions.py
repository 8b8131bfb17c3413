"""`/v1/completions` (legacy) through the SDK, streaming and not, local and remote."""

from __future__ import annotations

import openai
import pytest


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "remote"])
def test_completion(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is",
                                  max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == model
    assert r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 5 and r.usage.prompt_tokens > 0


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "remote"])
def test_streaming_completion(client, model):
    chunks = list(client.completions.create(model=model, prompt="One, two, three,",
                                            max_tokens=5, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert all(c.object == "text_completion" for c in chunks)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_same_answer_streamed_or_not(client):
    kwargs = dict(model="smollm2-135m-instruct", prompt="Water boils at", max_tokens=6,
                  temperature=0)
    whole = client.completions.create(**kwargs).choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs)
                       if c.choices)
    assert whole == streamed


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "remote"])
def test_several_completions_each_echo_the_prompt(client, model):
    ask = dict(model=model, prompt="My favourite animal is", max_tokens=5, temperature=1.0,
               seed=11, n=2, echo=True)
    r = client.completions.create(**ask)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.text.startswith("My favourite animal is") for c in r.choices)
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    assert [streamed[0], streamed[1]] == [c.text for c in r.choices]


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "remote"])
def test_a_batch_of_prompts_answers_each_in_order(client, model):
    prompts = ["The capital of France is", "Two plus two equals"]
    r = client.completions.create(model=model, prompt=prompts, max_tokens=4, temperature=0,
                                  echo=True)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.text[:len(p)] for c, p in zip(r.choices, prompts, strict=True)] == prompts
    alone = [client.completions.create(model=model, prompt=p, max_tokens=4, temperature=0)
             for p in prompts]
    assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(model=model, prompt=prompts, max_tokens=4,
                                           temperature=0, n=2, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    assert sorted(streamed) == [0, 1, 2, 3]  # prompt p's two choices at 2p and 2p + 1
    assert streamed[0] == streamed[1] and streamed[2] == streamed[3]  # greedy


def test_a_bad_prompt_in_a_batch_is_named(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="smollm2-135m-instruct", prompt=["fine", ""],
                                  max_tokens=2)
    assert info.value.body["param"] == "prompt[1]"


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "remote"])
def test_completion_logprobs(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is",
                                  max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(top) <= 2 and max(top.values()) == p  # greedy: the likeliest, each time
               for top, p in zip(lp.top_logprobs, lp.token_logprobs, strict=True))
