"""The plan of one engine step as the scheduler builds it, and what it hands the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.sequence import ScheduledSequence, Sequence


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    # (pool block, K/V) of handed prompts' last partial blocks, copied in before the step
    tail_loads: list[tuple[int, Any]] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class StepPlan:
    """The step being planned: tokens per sequence (in batch order), budget left, and who
    was preempted to make room."""

    budget: int
    tokens: dict[Sequence, int] = field(default_factory=dict)
    preempted: list[Sequence] = field(default_factory=list)
    out_of_blocks: bool = False  # a running sequence was preempted for blocks: admit nobody
    # the classes below the default keep to short steps (`SchedulingPolicy.short_low_steps`)
    short_low_steps: bool = False
    tail_loads: dict[Sequence, tuple[int, Any]] = field(default_factory=dict)

    def give(self, seq: Sequence, num_new: int, past_budget: bool = False) -> None:
        """`seq` computes `num_new` more tokens this step (`past_budget`: beyond what is
        left, the last phase's prompt tails; nothing is planned after)."""
        assert 0 < num_new and (past_budget or num_new <= self.budget), \
            f"{num_new} tokens for {seq}, {self.budget} left"
        self.tokens[seq] = self.tokens.get(seq, 0) + num_new
        self.budget = max(0, self.budget - num_new)

    def drop(self, seq: Sequence) -> None:
        """`seq` was preempted: whatever it had been given goes back to the budget."""
        self.budget += self.tokens.pop(seq, 0)
        self.tail_loads.pop(seq, None)
        self.preempted.append(seq)

    def output(self) -> SchedulerOutput:
        items = [ScheduledSequence(seq, n, seq.num_computed_tokens + n == seq.num_tokens)
                 for seq, n in self.tokens.items()]
        return SchedulerOutput(items, self.preempted, list(self.tail_loads.values()))
