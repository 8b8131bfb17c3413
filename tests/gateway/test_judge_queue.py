"""The judge queue (gateway/judge_queue.py) with a scripted clock and judges: bounded at ten
seconds of the judge's rate, judged at that rate, shed first while the gateway is busy, and
an offer never waits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cache.grey import GreyCandidate, GreyPair
from cache.response_cache import ResponseCache
from gateway.judge_queue import BOUND_SECONDS, JudgeQueue, RouteQueue
from tests.cache.grey_pairs import CAPITAL, SEAT, S, Scripted, ask, grey_miss


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def cache() -> AsyncIterator[ResponseCache]:
    c = await ResponseCache.open()
    yield c
    await c.close()


def pair(n: int) -> GreyPair:
    """A pair whose entry is not stored: judging it ends before any judge is asked."""
    return GreyPair(ask(f"question {n}?"), S, GreyCandidate(f"missing-{n}", "q?", 0.5),
                    {"content": "a"})


def test_the_queue_holds_ten_seconds_of_the_judges_rate(cache):
    queue = JudgeQueue(cache, {"r": RouteQueue(Scripted(True), rate_per_s=2.0)}, clock=Clock())
    offered = [queue.offer(pair(n)) for n in range(50)]
    assert offered.count(True) == BOUND_SECONDS * 2 == 20
    assert queue.waiting("r") == 20 and queue.outcomes["shed"] == 30
    assert cache.stats.get("r").judge_shed == 30


def test_a_slow_judge_still_holds_one_pair():
    assert RouteQueue(Scripted(True), rate_per_s=0.01).capacity == 1


def test_a_route_without_a_judge_takes_nothing(cache):
    queue = JudgeQueue(cache, {}, clock=Clock())
    assert queue.offer(pair(1)) is False


async def test_pairs_are_judged_at_the_routes_rate(cache):
    clock = Clock()
    queue = JudgeQueue(cache, {"r": RouteQueue(Scripted(True), rate_per_s=2.0)}, clock=clock)
    for n in range(5):
        queue.offer(pair(n))
    assert await queue.step() and not await queue.step()  # one token at the start
    clock.now += 0.5
    assert await queue.step() and not await queue.step()  # a token every half second
    clock.now += 10
    assert await queue.step() and not await queue.step()  # tokens never pile up past one
    assert sum(queue.outcomes.values()) == 3 and queue.waiting("r") == 2


async def test_judging_is_shed_first_while_the_gateway_is_busy(cache):
    busy = {"r": True}
    queue = JudgeQueue(cache, {"r": RouteQueue(Scripted(True), rate_per_s=5.0)},
                       busy=lambda route: busy[route], clock=Clock())
    assert queue.offer(pair(1)) is False  # at the door
    busy["r"] = False
    assert queue.offer(pair(2)) is True
    busy["r"] = True
    assert await queue.step()  # at the head of the queue: dropped unjudged
    assert (queue.waiting("r"), sum(queue.outcomes.values()), queue.outcomes["shed"]) == (0, 2, 2)
    assert cache.semantic.budgets.route("r").shed == 2


async def test_a_queued_pair_is_judged_and_applied(cache):
    await cache.store(ask(CAPITAL), {"content": "Canberra"}, S)
    judge = Scripted(True)
    queue = JudgeQueue(cache, {"r": RouteQueue(judge, rate_per_s=1.0)}, clock=Clock())
    assert queue.offer(await grey_miss(cache, SEAT))
    await queue.drain()
    assert (judge.asked, queue.outcomes["promoted"]) == (1, 1)
    assert (await cache.lookup(ask(SEAT), S)).answer == {"content": "Canberra"}
