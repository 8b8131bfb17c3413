"""`UpstreamTimeout`: each wait bounded, one timer per attempt, others' cancellations kept."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.upstream_timeout import UpstreamTimeout


class Late(Exception):
    pass


async def ticks(n: int, every_s: float):
    for i in range(n):
        await asyncio.sleep(every_s)
        yield i


async def drain(timer: UpstreamTimeout, stream) -> list[int]:
    got = []
    while (item := await timer.next(stream)) is not None:
        got.append(item)
    return got


async def test_steady_chunks_outlast_the_per_wait_timeout():
    timer = UpstreamTimeout(0.1, None, Late)
    try:  # 12 waits of 20 ms: 240 ms in all, each well inside 100 ms
        assert await drain(timer, ticks(12, 0.02)) == list(range(12))
    finally:
        timer.close()


async def test_a_stalled_wait_raises_the_timeout_error():
    timer = UpstreamTimeout(0.1, None, Late)
    stream = ticks(3, 0.02)
    assert await timer.next(stream) == 0
    await asyncio.sleep(0.3)  # the consumer's own time does not count
    assert await timer.next(stream) == 1
    stalled = ticks(1, 10.0)
    t0 = time.monotonic()
    with pytest.raises(Late):
        await timer.next(stalled)
    assert time.monotonic() - t0 < 5
    assert asyncio.current_task().cancelling() == 0  # the timer's cancel was absorbed
    timer.close()


async def test_the_total_deadline_bounds_all_waits():
    loop = asyncio.get_running_loop()
    timer = UpstreamTimeout(10.0, loop.time() + 0.15, Late)
    with pytest.raises(Late):
        await drain(timer, ticks(100, 0.02))
    timer.close()


async def test_someone_elses_cancellation_stays_a_cancellation():
    async def consume() -> None:
        timer = UpstreamTimeout(10.0, None, Late)
        try:
            await drain(timer, ticks(1, 10.0))
        finally:
            timer.close()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_timeout_errors_from_the_stream_become_the_timeout_error():
    async def failing():
        raise TimeoutError
        yield  # pragma: no cover

    timer = UpstreamTimeout(10.0, None, Late)
    with pytest.raises(Late):
        await timer.next(failing())
    timer.close()
