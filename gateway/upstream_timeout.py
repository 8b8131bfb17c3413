"""The route's upstream timeouts with one timer per upstream attempt, not one per chunk.

Each wait for an upstream's next chunk may last `timeout_s` (and all of them together end at
the route's total deadline). `asyncio.timeout_at` around every wait arms and cancels an
event-loop timer per chunk, several per request on the gateway's hottest path. Here one
timer is armed for the first wait and, when it fires, either cancels the waiting task (the
current wait is over time) or re-arms itself for the current wait's end: waits that finish
in time cost a clock read and two attribute writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")
_EARLY_S = 0.001  # loop timers may fire this much before their time


class UpstreamTimeout:
    """Bounds each `next(stream)` call; `close()` when the attempt ends."""

    def __init__(self, timeout_s: float, deadline: float | None,
                 on_timeout: Callable[[], Exception]) -> None:
        self.loop = asyncio.get_running_loop()
        self.timeout_s, self.deadline = timeout_s, deadline
        self.on_timeout = on_timeout  # the exception a timed-out wait raises
        self._ends: float | None = None  # the current wait's end; None when not waiting
        self._task: asyncio.Task | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelling = 0

    async def next(self, stream: AsyncIterator[T]) -> T | None:
        """The stream's next item within the time left; None at its end."""
        ends = self.loop.time() + self.timeout_s
        if self.deadline is not None and self.deadline < ends:
            ends = self.deadline
        self._ends = ends
        if self._task is None:  # the task iterating the upstream's stream
            self._task = asyncio.current_task()
        if self._handle is None:
            self._handle = self.loop.call_at(ends, self._check)
        try:
            return await anext(stream, None)
        except asyncio.CancelledError:
            if self._fired and self._task is not None \
                    and self._task.uncancel() <= self._cancelling:
                raise self.on_timeout() from None  # our cancellation, nobody else's
            raise
        except TimeoutError:
            raise self.on_timeout() from None
        finally:
            self._ends = None

    def _check(self) -> None:
        self._handle = None
        ends = self._ends
        if ends is None or self._fired:
            return  # not waiting: the next wait arms a timer again
        if self.loop.time() + _EARLY_S >= ends and self._task is not None:
            self._fired = True
            self._cancelling = self._task.cancelling()
            self._task.cancel()
        else:
            self._handle = self.loop.call_at(ends, self._check)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
