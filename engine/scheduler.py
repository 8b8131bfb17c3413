"""Continuous batching with chunked prefill: decide, each step, who runs and how many tokens.

Every step spends a token budget in four phases (`Scheduler.schedule`):

1. decodes: each running sequence with one token left to compute gets it;
2. prefill chunks: each running sequence still reading its prompt gets a chunk, so one long
   prompt is read over several steps while everyone else keeps decoding. While a request
   waits for a free running slot, a chunk takes at most half the budget, so a short prompt
   arriving behind a long one starts at the next step instead of after the whole prefill;
3. admission: waiting sequences, in line order (arrival under fcfs), while budget, slots and blocks last;
4. top-up: budget nobody waiting could use goes back to the chunks capped in phase 2, and a
   prompt whose rest would be a short tail (an eighth of the budget) reads it now.

When the KV pool runs dry in phases 1-2, the running sequence that ranks last (under fcfs
the most recently arrived) is preempted (its blocks freed, recomputed later; its registered
blocks will likely still hit) instead of failing the request, and the step admits nobody:
phases 3-4 are skipped, since memory is short and a newcomer would only be preempted in turn.

Under the priority policy (engine/priority.py) phases 2 and 3 are one loop in rank order,
so a better class is admitted before a worse one's prefill chunk takes the budget, and a
waiting request of a better class that finds the running set full, or the pool short of
its first chunk, preempts the running request that ranks last; short of budget only, it
takes a worse class's tokens instead, which wait a step. A step in which a better class
reads a prompt carries no worse class's tokens (but a block of the oldest request's when it
waited out the step before: it never waits two in a row). While a request of the default
class or a better one is in the engine, the classes below the default read a quarter of
the budget of prompt a step, in steps apart from their decodes, so the steps a better
class decodes in, or arrives during, are short; with none there, they are scheduled as
under fcfs (an arrival cuts the step in flight at its next layer: LLMEngine.note_arrival).
"""

from __future__ import annotations

import time
from collections import deque

from engine.block_manager import KVCacheManager
from engine.priority import SchedulingPolicy
from engine.sequence import Sequence, SequenceStatus
from engine.step_plan import SchedulerOutput, StepPlan

__all__ = ["Scheduler", "SchedulerOutput", "StepPlan"]


class Scheduler:
    """Owns the waiting queue and the running set; the KV manager owns the blocks."""

    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 policy: str = "fcfs") -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        # a prompt's last chunk may run past the budget by this much (`_top_up_prefills`)
        self.tail_tokens = max_num_batched_tokens // 8
        self.policy = SchedulingPolicy(policy)
        self.waiting: deque[Sequence] = deque()  # in line order (engine/priority.py)
        self.running: list[Sequence] = []
        self.num_preemptions = 0  # every preemption, both causes
        self.num_priority_preemptions = 0  # of them, a better class taking the room
        self._low_prompt_turn = False  # `alternate_low_classes`: whose turn it was last
        self._oldest_waited: Sequence | None = None  # deferred in the last step (`priority`)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.policy.enqueue(self.waiting, seq)
        if seq.session_id is not None:
            self.kv.touch_session(seq.session_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """The next step, in the four phases of the module docstring."""
        plan = StepPlan(self.max_num_batched_tokens,
                        short_low_steps=self.policy.short_low_steps(self.running, self.waiting))
        oldest = self.policy.oldest(self.running, self.waiting)
        chunk_cap = self._prefill_chunk_cap()
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes:
            if plan.budget == 0:
                break
            self._schedule_running(plan, seq, 1, oldest)
        if self.policy.by_priority:
            self._prefill_and_admit_by_rank(plan, prefills, chunk_cap, oldest)
            if plan.short_low_steps:
                self._low_prompt_turn = self.policy.alternate_low_classes(
                    plan, decodes, not self._low_prompt_turn)
        else:
            for seq in prefills:
                if plan.budget == 0:
                    break
                self._schedule_running(plan, seq, min(seq.num_uncomputed_tokens, plan.budget,
                                                      chunk_cap), oldest)
            if not plan.out_of_blocks:
                self._admit_waiting(plan, oldest)
        if not plan.out_of_blocks:
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

    def _schedule_running(self, plan: StepPlan, seq: Sequence, num_new: int,
                          oldest: Sequence | None) -> None:
        """Give a running sequence `num_new` tokens, if it is still running and fits."""
        if seq.status is not SequenceStatus.RUNNING:
            return  # preempted earlier in this step to make room for another
        if self._make_room(plan, seq, num_new, oldest):
            plan.give(seq, num_new)

    def _make_room(self, plan: StepPlan, seq: Sequence, num_new: int,
                   oldest: Sequence | None) -> bool:
        """Allocate `num_new` slots for `seq`, preempting the running sequence that ranks
        last until they fit; False when that was `seq` itself."""
        while not self.kv.allocate_slots(seq, num_new):
            victim = self._last_ranked(oldest)
            self._preempt(victim, plan)
            plan.out_of_blocks = True
            if victim is seq:
                return False
        return True

    def _last_ranked(self, oldest: Sequence | None) -> Sequence:
        return max(self.running, key=lambda s: self.policy.rank(s, oldest))

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        """Free `seq`'s blocks and put it back in line, at its own place (engine/priority.py)."""
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.policy.requeue(self.waiting, seq)
        plan.drop(seq)

    def _displace(self, plan: StepPlan, seq: Sequence, oldest: Sequence | None) -> bool:
        """Preempt the running request that ranks last for the waiting `seq`, when the
        policy lets a request of `seq`'s class take its room (`may_displace`)."""
        if not self.running:
            return False
        victim = self._last_ranked(oldest)
        if not self.policy.may_displace(victim, seq, oldest):
            return False
        self._preempt(victim, plan)
        self.num_priority_preemptions += 1
        return True

    # ------------------------------------------------------------ phases 3-4: waiting

    def _admit_waiting(self, plan: StepPlan, oldest: Sequence | None) -> None:
        """Admit waiting sequences in line order while budget, slots and blocks last; one
        that does not fit the pool holds back those behind it (first come, first served)."""
        pending = self._pending_block_hashes()
        for seq in list(self.waiting):
            if not self._admit(plan, seq, pending, oldest):
                break

    def _prefill_and_admit_by_rank(self, plan: StepPlan, prefills: list[Sequence],
                                   chunk_cap: int, oldest: Sequence | None) -> None:
        """Phases 2-3 under the priority policy: running prefills and waiting requests in
        rank order, so budget and room go to the better class first; a worse class reads
        no prompt in a step where a better one does, and in short steps the classes below the
        default read few tokens a step, all together (`SchedulingPolicy.low_class_tokens`),
        so a step a request of the default class decodes in ends soon."""
        admitting = not plan.out_of_blocks
        pending = self._pending_block_hashes()
        floor: int | None = None  # the best class that reads prompt tokens in this step
        low_left = self.policy.low_class_tokens(self.max_num_batched_tokens,
                                                plan.short_low_steps)
        for seq in self.policy.in_order(oldest, prefills, self.waiting):
            if seq in plan.preempted or (floor is not None and seq.priority > floor):
                continue  # displaced in this step, or a worse class than one reading now
            cap = chunk_cap if seq.priority <= 0 else min(chunk_cap, low_left)
            if cap == 0:
                continue  # classes below the default have read their share of this step
            if seq.status is SequenceStatus.RUNNING:
                if plan.budget == 0:
                    continue
                self._schedule_running(plan, seq, min(seq.num_uncomputed_tokens, plan.budget,
                                                      cap), oldest)
                admitting = admitting and not plan.out_of_blocks  # it preempted for blocks
            elif admitting:  # with no budget left, only by displacing a worse class
                admitted = self._admit(plan, seq, pending, oldest, cap)
                # one that does not fit holds back those behind it (its class or worse),
                # but the oldest, first whatever its class, holds back no better class
                admitting = (admitted or seq is oldest) and not plan.out_of_blocks
            elif plan.budget == 0:
                break
            if seq in plan.tokens:
                floor = seq.priority if floor is None else min(floor, seq.priority)
                if seq.priority > 0 and seq.num_uncomputed_tokens > 1:
                    low_left -= min(plan.tokens[seq], low_left)
        waited = None
        if floor is not None:  # the oldest waits out at most one such step in a row
            keeps = oldest if oldest is self._oldest_waited else None
            planned = oldest in plan.tokens
            self.policy.defer_worse_classes(plan, floor, keeps, self.kv.block_size)
            waited = oldest if planned and oldest not in plan.tokens else None
        self._oldest_waited = waited

    def _admit(self, plan: StepPlan, seq: Sequence, pending: set[int],
               oldest: Sequence | None, cap: int | None = None) -> bool:
        """Admit the waiting `seq` if budget, a running slot and blocks for its first chunk
        allow, displacing worse classes for any of them (`_displace`); False when it cannot,
        which ends admission for this step (True when it waits for a twin's block)."""
        bs = self.kv.block_size
        while plan.budget <= 0 or len(self.running) >= self.max_num_seqs:
            if plan.budget <= 0 and self.policy.defer_one(plan, seq, oldest):
                continue  # a worse class's tokens wait a step: nothing to recompute
            if not self._displace(plan, seq, oldest):
                return False
        cached = self.kv.find_cached_prefix(seq)
        remaining = seq.num_tokens - len(cached) * bs
        if pending and self._waits_for_twin(seq, len(cached), remaining, plan, pending):
            return True
        num_new = min(remaining, plan.budget, cap or plan.budget)
        while not self.kv.allocate_slots(seq, num_new, cached):
            if not self._displace(plan, seq, oldest):
                return False
            num_new = min(remaining, plan.budget, cap or plan.budget)  # the victim's came back
        self._start(seq, len(cached) * bs)
        num_new -= self._adopt_handed_tail(plan, seq, len(cached), num_new)
        plan.give(seq, num_new)
        pending.update(seq.block_hashes[len(cached):])
        return True

    def _adopt_handed_tail(self, plan: StepPlan, seq: Sequence, num_cached_blocks: int,
                           num_new: int) -> int:
        """The prompt tokens of `seq` that the step loads instead of computing: the last
        partial block of a prompt another engine read (`Sequence.handed`), when every full
        block before it was found cached and `seq` holds only the prompt and the other
        engine's first token. `seq` then computes just that token this step, as a decode:
        the answer goes on as the other engine's would have, bit for bit."""
        handed, bs = seq.handed, self.kv.block_size
        if handed is None or handed.tail is None:
            return 0
        tail, handed.tail = handed.tail, None  # used now or never
        tail_len = seq.num_prompt_tokens % bs
        if num_cached_blocks != seq.num_prompt_tokens // bs or num_new != tail_len + 1 \
                or seq.num_tokens != seq.num_prompt_tokens + 1:
            return 0
        plan.tail_loads[seq] = (seq.block_table[num_cached_blocks], tail)
        seq.num_computed_tokens += tail_len
        seq.num_cached_tokens += tail_len
        return tail_len

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
        """Give budget nobody waiting could use back to prefill chunks capped earlier (not
        to a class below the default in short steps: `short_low_steps`). A
        prompt whose rest after this step would be a short tail (at most `tail_tokens`)
        reads it now, past the budget: a whole further step over every layer's weights
        for a few tokens costs more than the longer step (a 512-token budget and a
        530-token chat prompt: 0.19 s against 0.22 s in two steps, one thread)."""
        for seq, num_new in list(plan.tokens.items()):
            if not self.policy.may_top_up(seq, plan.short_low_steps):
                continue
            rest = seq.num_uncomputed_tokens - num_new
            extra = rest if 0 < rest <= self.tail_tokens else min(rest, plan.budget)
            if extra > 0 and self.kv.allocate_slots(seq, num_new + extra):
                plan.give(seq, extra, past_budget=extra > plan.budget)
