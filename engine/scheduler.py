"""Continuous batching with chunked prefill: decide, each step, who runs and how many tokens.

Every step spends a token budget: decodes of running sequences first (one token each),
then prefill chunks of partially prefilled and waiting sequences, so one long prompt is
read over several steps while everyone else keeps decoding. While requests wait, a prompt still being prefilled takes at most half the
budget, so a short prompt arriving behind a long one starts at the next step instead of
after the whole long prefill. When the KV pool runs dry the
most recently arrived running sequence is preempted (its blocks freed, recomputed later;
its registered blocks will likely still hit) instead of failing the request.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import KVCacheManager
from engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSequence:
    seq: Sequence
    num_new_tokens: int  # tokens to compute this step, starting at seq.num_computed_tokens
    samples: bool  # this step computes the sequence's last token, so it samples the next


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
        budget = self.max_num_batched_tokens
        chosen: dict[Sequence, int] = {}
        preempted: list[Sequence] = []
        # Leave room for waiting requests when there is a slot for them.
        admitting = bool(self.waiting) and len(self.running) < self.max_num_seqs
        chunk_cap = max(1, self.max_num_batched_tokens // 2) if admitting else budget
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decodes + prefills:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_new = min(seq.num_uncomputed_tokens, budget, chunk_cap)
            while not self.kv.allocate_slots(seq, num_new):
                victim = max(self.running, key=lambda s: s.arrival_time)
                self._preempt(victim)
                preempted.append(victim)
                budget += chosen.pop(victim, 0)
                if victim is seq:
                    break
            else:
                chosen[seq] = num_new
                budget -= num_new
        if not preempted:
            budget = self._admit_waiting(chosen, budget)
        items = [ScheduledSequence(s, n, s.num_computed_tokens + n == s.num_tokens)
                 for s, n in chosen.items()]
        return SchedulerOutput(items, preempted)

    def update(self, output: SchedulerOutput) -> None:
        """Record that the scheduled tokens were computed (their K/V is in the cache now)."""
        for item in output.scheduled:
            item.seq.num_computed_tokens += item.num_new_tokens
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

    def abort(self, request_id: str) -> Sequence | None:
        for seq in [*self.running, *self.waiting]:
            if seq.request_id == request_id:
                self.finish(seq, "abort")
                return seq
        return None

    def _admit_waiting(self, chosen: dict[Sequence, int], budget: int) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.kv.find_cached_prefix(seq)
            num_new = min(seq.num_tokens - len(cached) * self.kv.block_size, budget)
            if not self.kv.allocate_slots(seq, num_new, cached):
                break
            self.waiting.popleft()
            self.running.append(seq)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
                seq.num_cached_tokens = min(len(cached) * self.kv.block_size, seq.num_prompt_tokens)
            chosen[seq] = num_new
            budget -= num_new
        return budget

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
