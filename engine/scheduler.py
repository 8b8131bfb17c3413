"""Continuous batching with chunked prefill: decide, each step, who runs and how many tokens.

Every step spends a token budget in four phases (`Scheduler.schedule`):

1. decodes: each running sequence with one token left to compute gets it;
2. prefill chunks: each running sequence still reading its prompt gets a chunk, so one long
   prompt is read over several steps while everyone else keeps decoding. While a request
   waits for a free running slot, a chunk takes at most half the budget, so a short prompt
   arriving behind a long one starts at the next step instead of after the whole prefill;
3. admission: waiting sequences, in arrival order, while budget, slots and blocks last;
4. top-up: budget nobody waiting could use goes back to the chunks capped in phase 2.

When the KV pool runs dry in phases 1-2, the most recently arrived running sequence is
preempted (its blocks freed, recomputed later; its registered blocks will likely still hit)
instead of failing the request, and the step admits nobody: phases 3-4 are skipped, since
memory is short and a newcomer would only be preempted in turn.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import KVCacheManager
from engine.sequence import ScheduledSequence, Sequence, SequenceStatus


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

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

    def give(self, seq: Sequence, num_new: int) -> None:
        """`seq` computes `num_new` more tokens this step."""
        assert 0 < num_new <= self.budget, f"{num_new} tokens for {seq}, {self.budget} left"
        self.tokens[seq] = self.tokens.get(seq, 0) + num_new
        self.budget -= num_new

    def drop(self, seq: Sequence) -> None:
        """`seq` was preempted: whatever it had been given goes back to the budget."""
        self.budget += self.tokens.pop(seq, 0)
        self.preempted.append(seq)

    def output(self) -> SchedulerOutput:
        items = [ScheduledSequence(seq, n, seq.num_computed_tokens + n == seq.num_tokens)
                 for seq, n in self.tokens.items()]
        return SchedulerOutput(items, self.preempted)


class Scheduler:
    """Owns the waiting queue and the running set; the KV manager owns the blocks."""

    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)
        if seq.session_id is not None:
            self.kv.touch_session(seq.session_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """The next step, in the four phases of the module docstring."""
        plan = StepPlan(self.max_num_batched_tokens)
        chunk_cap = self._prefill_chunk_cap()
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes:
            if plan.budget == 0:
                break
            self._schedule_running(plan, seq, 1)
        for seq in prefills:
            if plan.budget == 0:
                break
            self._schedule_running(plan, seq, min(seq.num_uncomputed_tokens, plan.budget,
                                                  chunk_cap))
        if not plan.preempted:
            self._admit_waiting(plan)
            self._top_up_prefills(plan)
        return plan.output()

    def update(self, output: SchedulerOutput) -> None:
        """Record that the scheduled tokens were computed (their K/V is in the cache now)."""
        for item in output.scheduled:
            item.seq.num_computed_tokens += item.num_new_tokens
            assert item.seq.num_computed_tokens <= item.seq.num_tokens, \
                f"{item.seq}: computed tokens it does not have"
            self.kv.cache_full_blocks(item.seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Retire a sequence (stop, length or abort) and release its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.kv.free(seq)

    def check(self) -> None:
        """Audit the queues and the KV pool together (`KVCacheManager.check`): for tests."""
        assert len(self.running) <= self.max_num_seqs, self.running
        assert all(seq.status is SequenceStatus.RUNNING for seq in self.running), self.running
        assert all(seq.status is SequenceStatus.WAITING and not seq.block_table
                   for seq in self.waiting), self.waiting
        self.kv.check(self.running)

    def abort(self, request_id: str) -> Sequence | None:
        for seq in [*self.running, *self.waiting]:
            if seq.request_id == request_id:
                self.finish(seq, "abort")
                return seq
        return None

    # ------------------------------------------------------------ phases 1-2: running

    def _prefill_chunk_cap(self) -> int:
        """The most tokens one running prefill takes this step: half the budget while a
        request waits for a free running slot (so it can start now), else all of it."""
        if self.waiting and len(self.running) < self.max_num_seqs:
            return max(1, self.max_num_batched_tokens // 2)
        return self.max_num_batched_tokens

    def _schedule_running(self, plan: StepPlan, seq: Sequence, num_new: int) -> None:
        """Give a running sequence `num_new` tokens, if it is still running and fits."""
        if seq.status is not SequenceStatus.RUNNING:
            return  # preempted earlier in this step to make room for another
        if self._make_room(plan, seq, num_new):
            plan.give(seq, num_new)

    def _make_room(self, plan: StepPlan, seq: Sequence, num_new: int) -> bool:
        """Allocate `num_new` slots for `seq`, preempting the most recently arrived running
        sequence until they fit; False when that was `seq` itself."""
        while not self.kv.allocate_slots(seq, num_new):
            victim = max(self.running, key=lambda s: s.arrival_time)
            self._preempt(victim)
            plan.drop(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    # ------------------------------------------------------------ phases 3-4: waiting

    def _admit_waiting(self, plan: StepPlan) -> None:
        """Admit waiting sequences in arrival order while budget, slots and blocks last; one
        that does not fit the pool holds back those behind it (first come, first served)."""
        bs = self.kv.block_size
        pending = self._pending_block_hashes()
        for seq in list(self.waiting):
            if plan.budget <= 0 or len(self.running) >= self.max_num_seqs:
                break
            cached = self.kv.find_cached_prefix(seq)
            remaining = seq.num_tokens - len(cached) * bs
            if pending and self._waits_for_twin(seq, len(cached), remaining, plan, pending):
                continue
            num_new = min(remaining, plan.budget)
            if not self.kv.allocate_slots(seq, num_new, cached):
                break
            self._start(seq, len(cached) * bs)
            plan.give(seq, num_new)
            pending.update(seq.block_hashes[len(cached):])

    def _waits_for_twin(self, seq: Sequence, num_cached_blocks: int, remaining: int,
                        plan: StepPlan, pending: set[int]) -> bool:
        """Whether `seq` skips this step to reuse a block another sequence computes now.

        A sequence that cannot finish its prefill this step anyway, and whose next uncached
        block is being computed right now by another one (same system prompt or document,
        arrived together), waits for that block to be registered and then reuses it,
        instead of computing the same prefix twice. A prompt that fits the step goes now.
        """
        # the next block counts if the prefix cache could hand it over: a full block
        # before the last token (see `KVCacheManager.find_cached_prefix`)
        reusable = num_cached_blocks < (seq.num_tokens - 1) // self.kv.block_size
        return (remaining > plan.budget and reusable
                and seq.block_hashes[num_cached_blocks] in pending)

    def _start(self, seq: Sequence, num_cached_tokens: int) -> None:
        """Move an admitted sequence to the running set; a recomputed one keeps the figures
        of its first admission."""
        self.waiting.remove(seq)
        self.running.append(seq)
        seq.status = SequenceStatus.RUNNING
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = time.monotonic()
            seq.num_cached_tokens = min(num_cached_tokens, seq.num_prompt_tokens)

    def _pending_block_hashes(self) -> set[int]:
        """Hashes of the full blocks that running sequences are still prefilling."""
        if not self.kv.enable_prefix_caching:
            return set()
        pending: set[int] = set()
        for seq in self.running:
            if seq.num_uncomputed_tokens > 1:
                hashes = self.kv.compute_block_hashes(seq)
                # from the block holding the first uncomputed token on
                pending.update(hashes[seq.num_computed_tokens // self.kv.block_size:])
        return pending

    def _top_up_prefills(self, plan: StepPlan) -> None:
        """Give budget nobody waiting could use back to prefill chunks capped earlier."""
        for seq, num_new in list(plan.tokens.items()):
            extra = min(seq.num_uncomputed_tokens - num_new, plan.budget)
            if extra > 0 and self.kv.allocate_slots(seq, num_new + extra):
                plan.give(seq, extra)
