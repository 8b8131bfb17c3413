"""An asyncio event loop on a virtual clock: timing logic tested without waiting.

`loop.time()` starts at 0 and moves only when every task waits on a timer; it then jumps
straight to the next timer. A timeout of a minute runs in microseconds, events always happen
in the same order, and a test asserts exact times ("the fallback was asked at t=5.0"). The
code under test keeps using the loop as usual (`asyncio.sleep`, `asyncio.timeout_at`,
`loop.call_at`): the loop is where asyncio code reads its time, so that is where the fake
clock goes in.

    run_on_virtual_clock(main())   # main's `asyncio.get_running_loop().time()` starts at 0

A wait on anything but a timer (a socket, a thread) with no timer due would never end here,
so it raises instead: the tests that use this loop talk to in-process parts only.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClock:
    """The time the loop reports, in seconds since the loop started."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without sleeping; where the loop would sleep until its next timer, moves the
    clock there instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("every task waits, and not on a timer: nothing can wake them")
        self.clock.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.clock = VirtualClock()
        super().__init__(_JumpingSelector(self.clock))

    def time(self) -> float:
        return self.clock.now


def run_on_virtual_clock(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a fresh `VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)
