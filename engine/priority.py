"""Who goes first: the scheduling policy's order of requests and its preemption rules.

`fcfs` (the default) keeps today's order: arrival; the latest arrival is the one preempted
when blocks run short; every request has priority 0. `priority` (vLLM's
`--scheduling-policy priority`: an int per request, lower first) orders requests by
(priority, arrival) with one exception, the guarantee against starvation:

- **the oldest request in the engine ranks first, whatever its priority** (a guaranteed
  share of one running slot, in arrival order). A request of any class therefore becomes
  the oldest once those before it finish, and then runs to its end: it is admitted ahead
  of everyone and is never preempted while others run. Aging was the other choice; it
  lets old batch work overtake new interactive requests whenever batch work has queued long,
  which under a sustained batch overload is always.

Preemption picks the running request that ranks last. A waiting request may also displace
it (`may_displace`) when the running set is full or the pool cannot hold its first chunk,
but only across classes: never between equal priorities, so two requests of one class
never take turns preempting each other (a rank is fixed for life, so no two requests can
ping-pong either). A preempted request keeps its arrival time, hence its place in line.

    waiting (priority, arrival):   (0, 7.1)  (10, 1.0)*  (10, 2.0)  (10, 3.5)
    rank:                          2nd       1st        3rd        4th      * the oldest
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator

from engine.config import POLICIES
from engine.errors import InvalidRequest
from engine.sequence import Sequence, SequenceStatus
from engine.step_plan import StepPlan

PRIORITY_RANGE = (-(2 ** 31), 2 ** 31 - 1)  # an int32, as vLLM's
LOW_CLASS_SHARE = 4  # classes below the default read at most 1/4 of a step's budget


def check_priority(priority: object, policy: str) -> int:
    """The request's priority, or InvalidRequest (a 400 naming `priority`): an integer, and
    non-zero only under the `priority` policy."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRequest("priority must be an integer", "priority")
    low, high = PRIORITY_RANGE
    if not low <= priority <= high:
        raise InvalidRequest(f"priority must be between {low} and {high}", "priority")
    if priority != 0 and policy != "priority":
        raise InvalidRequest(
            f"priority {priority} needs the priority scheduling policy; this engine schedules "
            "first come, first served (start it with --scheduling-policy priority)", "priority")
    return priority


class SchedulingPolicy:
    """The order of requests under one policy (`POLICIES`); plain bookkeeping, no state
    but the name."""

    def __init__(self, name: str = "fcfs") -> None:
        if name not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {', '.join(POLICIES)}, "
                             f"not {name!r}")
        self.name = name
        self.by_priority = name == "priority"

    @staticmethod
    def line_key(seq: Sequence) -> tuple[int, float]:
        """A request's place in the waiting line under `priority` (the oldest aside)."""
        return seq.priority, seq.arrival_time

    def rank(self, seq: Sequence, oldest: Sequence | None) -> tuple[bool, int, float]:
        """Lower goes first and is preempted last: see the module docstring."""
        if not self.by_priority:
            return False, 0, seq.arrival_time
        return seq is not oldest, seq.priority, seq.arrival_time

    def requeue(self, waiting: deque[Sequence], seq: Sequence) -> None:
        """Put a preempted request back in line: first under fcfs (as it arrived before
        the others waiting), at its own (priority, arrival) place under priority."""
        if self.by_priority:
            bisect.insort(waiting, seq, key=self.line_key)
        else:
            waiting.appendleft(seq)

    def enqueue(self, waiting: deque[Sequence], seq: Sequence) -> None:
        """Put a new request in line."""
        if self.by_priority:
            bisect.insort(waiting, seq, key=self.line_key)
        else:
            waiting.append(seq)

    def oldest(self, running: Iterable[Sequence], waiting: Iterable[Sequence]
               ) -> Sequence | None:
        """The request the starvation guarantee protects (None under fcfs, where arrival
        order protects everyone)."""
        if not self.by_priority:
            return None
        return min((*running, *waiting), key=lambda s: s.arrival_time, default=None)

    def short_low_steps(self, running: list[Sequence], waiting: deque[Sequence]) -> bool:
        """Whether the classes below the default (priority > 0) keep to short steps now
        (`low_class_tokens`, `alternate_low_classes`, no leftover budget): under
        `priority`, while a request of the default class or a better one is in the
        engine, so that its decodes never wait for a long step of batch work. With none
        there, batch work is scheduled as under fcfs: a request arriving then cuts the
        step in flight at its next layer (LLMEngine.note_arrival), and short steps would
        cost batch work alone 15-19% of its throughput (two threads)."""
        if not self.by_priority:
            return False
        # the line is kept in (priority, arrival) order: its head is its best class
        return bool(waiting and waiting[0].priority <= 0) or any(s.priority <= 0
                                                                 for s in running)

    @staticmethod
    def low_class_tokens(budget: int, short: bool) -> int:
        """The most prompt tokens the classes below the default read in one step together:
        1/LOW_CLASS_SHARE of the budget in short steps (`short_low_steps`), so a request of
        the default class decoding beside them, or arriving mid-step, waits for a short
        step, not a long chunk of batch work; else the whole budget."""
        return max(1, budget // LOW_CLASS_SHARE) if short else budget

    @staticmethod
    def may_top_up(seq: Sequence, short: bool) -> bool:
        """Whether `seq` may take budget left over at the end of a step: not a class below
        the default in short steps."""
        return not (short and seq.priority > 0)

    def may_displace(self, victim: Sequence, waiter: Sequence, oldest: Sequence | None) -> bool:
        """Whether `waiter` may preempt the running `victim` to take its slot or blocks:
        only under `priority`, only across classes, only a victim ranking after it."""
        if not self.by_priority or victim.priority == waiter.priority:
            return False
        return self.rank(victim, oldest) > self.rank(waiter, oldest)

    # ------------------------------------------------------------ shaping a step's plan

    def defer_one(self, plan: StepPlan, seq: Sequence, oldest: Sequence | None) -> bool:
        """Give the waiting `seq` the budget of the last-ranked request of a worse class
        planned in this step (not the oldest): that one waits a step instead of being
        preempted. False when there is none (always under fcfs: one class)."""
        worse = [s for s in plan.tokens if s.priority > seq.priority and s is not oldest]
        if not worse:
            return False
        last = max(worse, key=lambda s: self.rank(s, oldest))
        plan.budget += plan.tokens.pop(last)
        return True

    @staticmethod
    def defer_worse_classes(plan: StepPlan, floor: int, keeps: Sequence | None,
                            block_size: int) -> None:
        """In a step where class `floor` reads a prompt, worse classes wait (their decodes
        and chunks planned earlier go back to the budget, the blocks they took stay theirs):
        the better class's first token then costs what it costs on an idle engine (one
        decode beside a 256-token prompt adds 10%), and a worse class loses one step per
        such prompt. `keeps` (the oldest request, when it waited out the step before) keeps
        a block's worth of its tokens: the starvation guarantee holds however many better
        prompts arrive."""
        for seq in [s for s in plan.tokens if s.priority > floor]:
            keep = min(plan.tokens[seq], block_size) if seq is keeps else 0
            plan.budget += plan.tokens[seq] - keep
            if keep:
                plan.tokens[seq] = keep
            else:
                del plan.tokens[seq]

    @staticmethod
    def alternate_low_classes(plan: StepPlan, decodes: list[Sequence],
                              prompt_turn: bool) -> bool:
        """In short steps (`short_low_steps`), a step carries the decodes of the classes
        below the default or their prompt chunks, by turns (`prompt_turn`: the prompts'),
        never both: either alone makes a short step, together a long one (two threads, 16
        decodes: 34 ms, 64 prompt tokens: 30 ms, both at once: 80 ms), and a better class
        decoding beside them waits for each step. Both progress every other step: no
        starvation.
        Returns the turn taken, or the other when there was no choice to make."""
        low_decodes = [s for s in decodes if s.priority > 0 and s in plan.tokens]
        low_prompts = [s for s in plan.tokens if s.priority > 0 and s not in low_decodes
                       and s.num_uncomputed_tokens > 1]
        if not (low_decodes and low_prompts):
            return not prompt_turn
        for seq in low_decodes if prompt_turn else low_prompts:
            plan.budget += plan.tokens.pop(seq)
        return prompt_turn

    def in_order(self, oldest: Sequence | None, prefills: list[Sequence],
                 waiting: deque[Sequence]) -> Iterator[Sequence]:
        """Running prefills and waiting requests together in rank order (`priority`): the
        oldest first, then both lines merged by (priority, arrival). `waiting` is kept in
        that order already; the caller may admit and preempt while it reads (a snapshot)."""
        if oldest is not None and (oldest.status is SequenceStatus.WAITING
                                   or oldest in prefills):
            yield oldest
        rest = sorted((s for s in prefills if s is not oldest), key=self.line_key)
        i = 0
        for seq in list(waiting):
            if seq is oldest:
                continue
            while i < len(rest) and self.line_key(rest[i]) <= self.line_key(seq):
                yield rest[i]
                i += 1
            yield seq
        yield from rest[i:]


def ahead_of(priority: int, running: list[Sequence], waiting: list[Sequence]
             ) -> tuple[list[Sequence], list[Sequence]]:
    """The running and waiting requests a new request of `priority` would find ahead of it
    under the priority policy, waiting ones in line order: those of its class or a better
    one, and the oldest (worse classes yield their slots to it, engine/wait_estimate.py)."""
    oldest = min((*running, *waiting), key=lambda s: s.arrival_time, default=None)
    running = [s for s in running if s.priority <= priority or s is oldest]
    waiting = sorted((s for s in waiting if s.priority <= priority or s is oldest),
                     key=lambda s: (s is not oldest, s.priority, s.arrival_time))
    return running, waiting

