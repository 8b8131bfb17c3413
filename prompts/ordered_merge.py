"""Run several async streams at once and yield their items in stream order.

Decomposition sends sub-requests concurrently but must answer in order. Every stream is
pumped by its own task into its own queue from the start; the merger yields stream 0's items
as they arrive (the first sub-answer streams at once), then stream 1's (already buffered if
it finished meanwhile), and so on. A failing stream yields a `PartFailed` in its place, so
the caller decides how to report it; the others carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
_END = object()


@dataclass
class PartFailed:
    index: int
    error: BaseException


@dataclass
class PartItem(Generic[T]):
    index: int
    item: T


async def merge_in_order(streams: list[AsyncIterator[T]]) -> AsyncIterator[PartItem[T] | PartFailed]:
    """Items of every stream, stream by stream, while all streams run concurrently."""
    queues: list[asyncio.Queue] = [asyncio.Queue() for _ in streams]

    async def pump(i: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                queues[i].put_nowait(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported in order, where the part's text would be
            queues[i].put_nowait(PartFailed(i, exc))
        finally:
            queues[i].put_nowait(_END)
            close = getattr(stream, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        for i, queue in enumerate(queues):
            while (item := await queue.get()) is not _END:
                yield item if isinstance(item, PartFailed) else PartItem(i, item)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
