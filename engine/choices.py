"""The `n` choices of one OpenAI request: `n` engine requests for the same prompt, their
deltas merged into one stream tagged with the choice's index.

The engine holds the shared prompt once: the choices' full prompt blocks hash alike, so the
block manager maps them to the same KV blocks (prefix caching), and only the answers take
blocks of their own. With a `seed`, choice `i` samples with `seed + i`: the choices differ
from each other yet come out the same on every run, as with one choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace

from engine.outputs import GenerationDelta
from engine.sampling_params import SamplingParams

IndexedDelta = tuple[int, GenerationDelta]
Start = Callable[[SamplingParams, str], AsyncIterator[GenerationDelta]]


def choice_requests(params: SamplingParams, n: int, request_id: str) -> list[tuple[SamplingParams,
                                                                                  str]]:
    """(sampling parameters, engine request id) for each of the `n` choices. A single choice
    keeps the request's own id."""
    if n == 1:
        return [(params, request_id)]
    return [(params if params.seed is None else replace(params, seed=params.seed + i),
             f"{request_id}-{i}") for i in range(n)]


def generate_choices(start: Start, params: SamplingParams, n: int,
                     request_id: str) -> AsyncIterator[IndexedDelta]:
    """The deltas of all `n` choices as they come; `start(params, request_id)` submits one
    engine request. Closing the stream aborts every choice still running."""
    return merge([start(p, rid) for p, rid in choice_requests(params, n, request_id)])


async def merge(streams: list[AsyncIterator[GenerationDelta]]) -> AsyncIterator[IndexedDelta]:
    """`(index, delta)` for the deltas of `streams`, in the order they arrive (streams ready at
    the same time in index order). An error in any stream ends the merge and closes the rest."""
    if len(streams) == 1:  # the common case: no task per delta
        async with aclosing(streams[0]) as only:  # type: ignore[type-var]
            async for delta in only:
                yield 0, delta
        return
    waits = {asyncio.ensure_future(anext(s)): i for i, s in enumerate(streams)}
    try:
        while waits:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in sorted(done, key=waits.__getitem__):
                index = waits.pop(wait)
                try:
                    delta = wait.result()
                except StopAsyncIteration:
                    continue
                waits[asyncio.ensure_future(anext(streams[index]))] = index
                yield index, delta
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)  # each stream idle before closing
        for stream in streams:
            await stream.aclose()  # type: ignore[attr-defined]
