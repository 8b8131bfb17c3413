"""The judge queue: grey-zone pairs waiting for their route's judge, never on a request's path.

The cache stage offers a pair once the answer is written (`offer`: no await, O(1)). Each
route with a judge has its own queue, bounded at ten seconds of its judge's rate
(`capacity`: 10 x `judge.rate_per_s`, at least one), and a token bucket at that rate; a
pair offered to a full queue is dropped. One worker task takes the routes' pairs in turn as
their tokens allow and judges them one at a time (cache/judging.py). Judging is shed first
under load: while the upstream a judgement would use has requests waiting (`busy`: the
admission's expected wait, the judge upstream's or, for `agreement`, whose embeddings share
the engine's thread, the route's own), pairs are dropped at the door and at the head of the
queue. Every drop counts in `judge_shed`; every outcome in `outcomes`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cache.grey import GreyPair
from cache.judgement import Judge
from cache.judging import Outcome, judge_pair
from cache.response_cache import ResponseCache

log = logging.getLogger("headstart.gateway")
BOUND_SECONDS = 10  # a route's queue holds this many seconds of its judge's rate


@dataclass
class RouteQueue:
    """One route's judge, its pairs waiting, its tokens."""

    judge: Judge
    rate_per_s: float
    pairs: deque[GreyPair] = field(default_factory=deque)
    tokens: float = 1.0
    refilled: float = 0.0

    @property
    def capacity(self) -> int:
        return max(1, math.ceil(BOUND_SECONDS * self.rate_per_s))

    def refill(self, now: float) -> None:
        self.tokens = min(1.0, self.tokens + (now - self.refilled) * self.rate_per_s)
        self.refilled = now

    def wait_s(self) -> float:
        """How long until the next token."""
        return max(0.0, (1.0 - self.tokens) / self.rate_per_s)


class JudgeQueue:
    """`offer(pair)` from the request's store step; `start()` the worker; `close()`."""

    def __init__(self, cache: ResponseCache, routes: dict[str, RouteQueue],
                 busy: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cache, self.routes, self.clock = cache, routes, clock
        self.busy = busy or (lambda route: False)
        self.outcomes: Counter[str] = Counter()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        now = clock()
        for queue in routes.values():
            queue.refilled = now

    def offer(self, pair: GreyPair) -> bool:
        """Queue `pair` for its route's judge; False when it is shed (the route has no
        judge, its queue is full, or the gateway is busy)."""
        route = pair.settings.route
        queue = self.routes.get(route)
        if queue is None:
            return False
        if len(queue.pairs) >= queue.capacity or self.busy(route):
            self._shed(route)
            return False
        queue.pairs.append(pair)
        self._wake.set()
        return True

    def waiting(self, route: str) -> int:
        queue = self.routes.get(route)
        return len(queue.pairs) if queue is not None else 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def drain(self) -> None:
        """Judge every pair waiting now, at each route's rate (tests, benchmarks)."""
        while any(q.pairs for q in self.routes.values()):
            if not await self.step():
                await asyncio.sleep(min(q.wait_s() for q in self.routes.values() if q.pairs))

    async def step(self) -> bool:
        """Judge the next pair whose route has a token; False when none is ready."""
        now = self.clock()
        for route, queue in self.routes.items():
            queue.refill(now)
            if not queue.pairs or queue.tokens < 1.0:
                continue
            pair = queue.pairs.popleft()
            if self.busy(route):
                self._shed(route)
                return True
            queue.tokens -= 1.0
            outcome = await judge_pair(self.cache, pair, queue.judge)
            self.outcomes[outcome.status] += 1
            self._log(route, outcome)
            return True
        return False

    async def _run(self) -> None:
        while True:
            try:
                if await self.step():
                    continue
                waits = [q.wait_s() for q in self.routes.values() if q.pairs]
                self._wake.clear()
                if waits:
                    await asyncio.sleep(min(waits))
                else:
                    await self._wake.wait()
            except asyncio.CancelledError:
                raise
            except Exception:  # the worker must outlive any one pair
                log.exception("judge queue: a judgement failed")

    def _shed(self, route: str) -> None:
        self.cache.stats.record(route, "judge_shed")
        self.cache.semantic.budgets.route(route).record_shed()
        self.outcomes["shed"] += 1

    @staticmethod
    def _log(route: str, outcome: Outcome) -> None:
        if outcome.judgement is not None:
            log.debug("judge %s on %s: %s (%s, score %.4f)", outcome.judgement.judge, route,
                      outcome.status, outcome.judgement.reason, outcome.score or 0.0)
