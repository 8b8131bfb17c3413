"""Concurrent streams merged in order: overlap observed by timestamps, failures in place."""

from __future__ import annotations

import asyncio
import time

from prompts.ordered_merge import PartFailed, PartItem, merge_in_order


async def slow_stream(name: str, pieces: int, delay: float, log: list, fail_at: int = -1):
    log.append((name, "start", time.perf_counter()))
    for i in range(pieces):
        await asyncio.sleep(delay)
        if i == fail_at:
            raise RuntimeError(f"{name} broke")
        yield f"{name}{i}"
    log.append((name, "end", time.perf_counter()))


async def test_streams_run_concurrently_and_merge_in_order():
    log: list = []
    streams = [slow_stream("a", 3, 0.05, log), slow_stream("b", 3, 0.01, log),
               slow_stream("c", 2, 0.02, log)]
    seen = [(item.index, item.item) async for item in merge_in_order(streams)]
    assert seen == [(0, "a0"), (0, "a1"), (0, "a2"), (1, "b0"), (1, "b1"), (1, "b2"),
                    (2, "c0"), (2, "c1")]
    starts = {n: t for n, what, t in log if what == "start"}
    ends = {n: t for n, what, t in log if what == "end"}
    # every stream started before the first one finished: they overlapped
    assert max(starts.values()) < ends["a"]
    assert ends["b"] < ends["a"] and ends["c"] < ends["a"]  # later parts finished while a ran


async def test_first_part_streams_before_the_others_finish():
    log: list = []
    streams = [slow_stream("a", 2, 0.01, log), slow_stream("b", 1, 0.3, log)]
    async for item in merge_in_order(streams):
        assert item.item == "a0"
        assert not any(n == "b" and what == "end" for n, what, _ in log)
        break


async def test_a_failure_is_reported_in_its_place():
    log: list = []
    streams = [slow_stream("a", 2, 0.01, log), slow_stream("b", 3, 0.01, log, fail_at=1),
               slow_stream("c", 1, 0.01, log)]
    items = [item async for item in merge_in_order(streams)]
    assert [type(i) for i in items] == [PartItem, PartItem, PartItem, PartFailed, PartItem]
    failed = items[3]
    assert failed.index == 1 and "b broke" in str(failed.error)
    assert items[4].item == "c0"


async def test_closing_early_cancels_the_rest():
    log: list = []
    streams = [slow_stream("a", 1, 0.01, log), slow_stream("b", 50, 0.05, log)]
    merged = merge_in_order(streams)
    await anext(merged)
    await merged.aclose()
    await asyncio.sleep(0.1)
    assert not any(n == "b" and what == "end" for n, what, _ in log)
