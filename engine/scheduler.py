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
                assert budget >= 0, f"step budget overspent on {seq}"
        if not preempted:
            budget = self._admit_waiting(chosen, budget)
            self._top_up_prefills(chosen, budget)
        items = [ScheduledSequence(s, n, s.num_computed_tokens + n == s.num_tokens)
                 for s, n in chosen.items()]
        return SchedulerOutput(items, preempted)

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

    def _admit_waiting(self, chosen: dict[Sequence, int], budget: int) -> int:
        """Admit waiting sequences in arrival order while budget, slots and blocks last.

        A sequence that cannot finish its prefill this step anyway, and whose next uncached
        block is being computed right now by another one (same system prompt or document,
        arrived together), waits for that block to be registered and then reuses it,
        instead of computing the same prefix twice. A prompt that fits the step goes now.
        """
        bs = self.kv.block_size
        pending = self._pending_block_hashes()
        for seq in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.max_num_seqs:
                break
            cached = self.kv.find_cached_prefix(seq)
            nxt = len(cached)
            remaining = seq.num_tokens - nxt * bs
            if (pending and remaining > budget and nxt < (seq.num_tokens - 1) // bs
                    and seq.block_hashes[nxt] in pending):
                continue
            num_new = min(remaining, budget)
            if not self.kv.allocate_slots(seq, num_new, cached):
                break
            self.waiting.remove(seq)
            self.running.append(seq)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
                seq.num_cached_tokens = min(nxt * bs, seq.num_prompt_tokens)
            chosen[seq] = num_new
            budget -= num_new
            pending.update(seq.block_hashes[nxt:])
        return budget

    def _pending_block_hashes(self) -> set[int]:
        """Hashes of the full blocks that running sequences are still prefilling."""
        if not self.kv.enable_prefix_caching:
            return set()
        pending: set[int] = set()
        for seq in self.running:
            if seq.num_uncomputed_tokens > 1:
                hashes = self.kv.compute_block_hashes(seq)
                pending.update(hashes[seq.num_computed_tokens // self.kv.block_size:])
        return pending

    def _top_up_prefills(self, chosen: dict[Sequence, int], budget: int) -> None:
        """Give budget nobody waiting could use back to prefill chunks capped earlier."""
        for seq, num_new in chosen.items():
            extra = min(seq.num_uncomputed_tokens - num_new, budget)
            if extra > 0 and self.kv.allocate_slots(seq, num_new + extra):
                chosen[seq] = num_new + extra
                budget -= extra

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
