"""engine/serving/choices.py: one engine request per choice, their deltas merged by index."""

from __future__ import annotations

import asyncio

import pytest

from engine.errors import InvalidRequest
from engine.outputs import GenerationDelta
from engine.sampling_params import SamplingParams
from engine.serving.choices import choice_requests, generate_choices, merge


def delta(text: str, finish: str | None = None) -> GenerationDelta:
    return GenerationDelta(request_id="r", text=text, token_ids=[0], finish_reason=finish,
                           prompt_tokens=3, cached_tokens=0, completion_tokens=1)


class Script:
    """An engine stream whose deltas are released one by one by the test."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.release = asyncio.Event()
        self.closed = False

    async def stream(self):
        try:
            for i, text in enumerate(self.texts):
                await self.release.wait()
                self.release.clear()
                yield delta(text, "stop" if i == len(self.texts) - 1 else None)
        finally:
            self.closed = True


def test_one_choice_keeps_the_request_and_its_id():
    params = SamplingParams(seed=7)
    assert choice_requests([([1, 2], params)], 1, "req") == [([1, 2], params, "req")]


def test_seeded_choices_get_consecutive_seeds_and_their_own_ids():
    requests = choice_requests([([1], SamplingParams(seed=7, temperature=0.8))], 3, "req")
    assert [(p.seed, p.temperature, rid) for _, p, rid in requests] == [
        (7, 0.8, "req-0"), (8, 0.8, "req-1"), (9, 0.8, "req-2")]
    unseeded = choice_requests([([1], SamplingParams())], 2, "req")
    assert [p.seed for _, p, _ in unseeded] == [None, None]


def test_a_batch_numbers_choices_prompt_by_prompt():
    a, b = SamplingParams(seed=0, max_tokens=5), SamplingParams(seed=0, max_tokens=9)
    requests = choice_requests([([1], a), ([2, 3], b)], 2, "req")
    # prompt p's choices at p * n + k, choice k seeded seed + k: each prompt samples as alone
    assert [(ids, p.max_tokens, p.seed, rid) for ids, p, rid in requests] == [
        ([1], 5, 0, "req-0"), ([1], 5, 1, "req-1"), ([2, 3], 9, 0, "req-2"),
        ([2, 3], 9, 1, "req-3")]


async def test_merge_hands_on_deltas_in_the_order_they_arrive():
    a, b = Script(["a1", "a2"]), Script(["b1"])
    merged = merge([a.stream(), b.stream()])
    order = []
    for script in (b, a, a):
        script.release.set()
        index, d = await anext(merged)
        order.append((index, d.text, d.finish_reason))
    assert order == [(1, "b1", "stop"), (0, "a1", None), (0, "a2", "stop")]
    with pytest.raises(StopAsyncIteration):
        await anext(merged)
    assert a.closed and b.closed


async def test_closing_the_merge_closes_every_stream_still_running():
    a, b = Script(["a1", "a2"]), Script(["b1", "b2"])
    merged = merge([a.stream(), b.stream()])
    a.release.set()
    assert (await anext(merged))[0] == 0
    await merged.aclose()  # the client left: both engine requests must be aborted
    assert a.closed and b.closed


async def test_a_refused_choice_fails_the_merge_and_closes_the_others():
    survivor = Script(["x"])

    def start(ids: list[int], params: SamplingParams, request_id: str):
        if request_id.endswith("-1"):
            async def refused():
                raise InvalidRequest("too long", "max_tokens")
                yield  # an async generator, as the engine's `generate`
            return refused()
        return survivor.stream()

    merged = generate_choices(start, [([1], SamplingParams())], 2, "req")
    with pytest.raises(InvalidRequest):
        await anext(merged)
    assert survivor.closed
