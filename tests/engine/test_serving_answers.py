"""engine/serving/answers.py: `(choice index, delta)` pairs -> OpenAI chunks and answers."""

from __future__ import annotations

import pytest

from engine.outputs import GenerationDelta, TokenLogprobs
from engine.serving.answers import fold, stream_chat, stream_completion
from openai_api import APIError

MODEL = "smollm2-135m-instruct"


def delta_list(texts: list[str], finish: str | None = "stop", prompt: int = 10,
               cached: int = 4, error: str | None = None, index: int = 0):
    """One choice's deltas, tagged with its index as `engine.serving.choices` hands them on."""
    out = []
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        out.append((index, GenerationDelta(
            request_id=f"r1-{index}", text=text, token_ids=[i], prompt_tokens=prompt,
            finish_reason=finish if last else None, cached_tokens=cached,
            completion_tokens=i + 1, error=error if last else None)))
    return out


async def collect_chat(deltas, *, model: str, n: int):
    return await fold(stream_chat(deltas, model=model, n=n, include_usage=True), "chat", model)


async def collect_completion(deltas, *, model: str, n: int, echoes=()):
    chunks = stream_completion(deltas, model=model, n=n, include_usage=True, echoes=echoes)
    return await fold(chunks, "completion", model)


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
