"""The choices of one OpenAI request: `n` engine requests per prompt (a legacy completion
may send a batch of prompts), their deltas merged into one stream tagged with the choice's
index, prompt `p`'s choices at `p * n` to `p * n + n - 1` (as OpenAI numbers them).

The engine holds a shared prompt once: the choices' full prompt blocks hash alike, so the
block manager maps them to the same KV blocks (prefix caching), and only the answers take
blocks of their own. With a `seed`, a prompt's choice `k` samples with `seed + k`: the
choices differ from each other yet come out the same on every run, as with one choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING

from engine.outputs import GenerationDelta
from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.sequence import HandedPrompt
    from engine.serving.metrics import EngineMetrics

IndexedDelta = tuple[int, GenerationDelta]
Prompt = tuple[list[int], SamplingParams]  # token ids and how to sample from them
# (ids, params, request_id, **handover) -> deltas: `start_choice` with its first five bound
Start = Callable[..., AsyncIterator[GenerationDelta]]


def choice_requests(prompts: list[Prompt], n: int,
                    request_id: str) -> list[tuple[list[int], SamplingParams, str]]:
    """(prompt ids, sampling parameters, engine request id) for each choice, by index. A
    single choice keeps the request's own id."""
    if len(prompts) == 1 and n == 1:
        ids, params = prompts[0]
        return [(ids, params, request_id)]
    out = []
    for index in range(len(prompts) * n):
        ids, params = prompts[index // n]
        if params.seed is not None:
            params = replace(params, seed=params.seed + index % n)
        out.append((ids, params, f"{request_id}-{index}"))
    return out


def start_choice(engine: AsyncEngine, metrics: EngineMetrics, endpoint: str,
                 session_id: str | None, cache_salt: str | None, ids: list[int],
                 params: SamplingParams, request_id: str, *, priority: int = 0,
                 handed: HandedPrompt | None = None,
                 keeps_tail: bool = False) -> AsyncIterator[GenerationDelta]:
    """One choice as one engine request, its latencies observed (a `Start` once the first
    five arguments and `priority` are bound; a handover passes `handed` or `keeps_tail`,
    engine/serving/kv_transfer.py)."""
    deltas = engine.generate(ids, params, request_id=request_id, session_id=session_id,
                             cache_salt=cache_salt, priority=priority, handed=handed,
                             keeps_tail=keeps_tail)
    return metrics.observe(deltas, endpoint)


def generate_choices(start: Start, prompts: list[Prompt], n: int,
                     request_id: str) -> AsyncIterator[IndexedDelta]:
    """The deltas of every choice as they come; `start(ids, params, request_id)` submits one
    engine request. Closing the stream aborts every choice still running."""
    return merge([start(*request) for request in choice_requests(prompts, n, request_id)])


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
