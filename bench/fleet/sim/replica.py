"""One simulated engine replica: the bundled engine's scheduling rules with a cost per step.

The scheduler follows `engine/scheduler.py`: each step decodes every running request one
token, gives prefill chunks what is left of a `budget`-token step (at most half of it to a
prompt already prefilling while others wait to be admitted), admits waiting requests first
come first served up to `max_num_seqs`, and registers every block a step completes in an LRU
prefix cache of `capacity_blocks` blocks. A step lasts

    step_s + prefill_token_s x prefill tokens + decode_seq_s x decoding requests
           + attend_pair_s x (query token, context token) pairs attended
           + prefill_step_s when the step prefills anything

(`StepCosts`, measured on the real engine by `bench/fleet/sim/calibrate.py`), plus `extra_s`
of other work queued for the step thread (a decode replica loading handed KV blocks, under
prefill/decode disaggregation; a request's `handed` blocks count as cached). Blocks leave
the cache in LRU order (a prefilling request touches its blocks every step, so they are the
newest); each registration and eviction is reported (the simulator makes KV events of them).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepCosts:
    """Seconds per engine step. Defaults: `headstart engine` with one torch thread and its
    AVX-512 kernels (int8 prefill, VNNI decode, VNNI slices for 17-48-row steps) on the
    2-core development machine without AMX (`python -m bench.fleet.sim.calibrate`,
    2026-11-27 08:01-08:04, medians of three runs). A step that prefills costs
    `prefill_step_s` more than a decode step whatever its size (32 new tokens take 34 ms,
    a decode step 7 ms): the prefill path's fixed work."""

    step_s: float = 0.00593
    prefill_token_s: float = 0.00069
    decode_seq_s: float = 0.00102
    attend_pair_s: float = 4.2e-7  # one query token against one context token
    prefill_step_s: float = 0.0134

    def step(self, prefill_tokens: int, decodes: int, pairs: float = 0.0) -> float:
        return (self.step_s + self.prefill_token_s * prefill_tokens
                + self.decode_seq_s * decodes + self.attend_pair_s * pairs
                + (self.prefill_step_s if prefill_tokens else 0.0))


@dataclass(eq=False)
class SimRequest:
    """One request at a replica: its prompt's block keys and how far it has got."""

    keys: list[int]  # block keys of the prompt's full blocks
    answer_keys: list[int]  # block keys of prompt + answer, registered when it ends
    prompt_tokens: int
    answer_tokens: int
    arrival: float
    payload: Any = None  # the simulator's own record of the request
    handed: int = 0  # blocks another replica handed over (prefill/decode disaggregation)
    computed: int = 0
    cached_tokens: int = 0
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float = 0.0
    gaps: list[float] = field(default_factory=list)  # seconds between its tokens

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_tokens


@dataclass
class StepResult:
    duration: float
    first_tokens: list[SimRequest] = field(default_factory=list)
    finished: list[SimRequest] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)


class SimReplica:
    def __init__(self, name: str, costs: StepCosts, capacity_blocks: int, block_size: int = 16,
                 max_num_seqs: int = 16, budget: int = 512) -> None:
        self.name = name
        self.costs = costs
        self.capacity = capacity_blocks
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.budget = budget
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.busy_s = 0.0
        self.served = 0
        self.stepping = False
        self.held_area = 0.0  # integral of requests held (queued or running) over time
        self._held_since = 0.0
        self.extra_s = 0.0  # other work on the step thread (loading handed blocks), next step

    def fresh_counters(self) -> SimReplica:
        """The same replica (its cache) with its queues empty and its counters at zero, for
        a run that follows another on it."""
        self.waiting.clear()
        self.running.clear()
        self.busy_s = self.held_area = self._held_since = 0.0
        self.served = 0
        self.stepping = False
        return self

    def note(self, now: float) -> None:
        """Account the requests held since the last change, before the count changes."""
        self.held_area += (len(self.waiting) + len(self.running)) * (now - self._held_since)
        self._held_since = now

    def submit(self, request: SimRequest, now: float = 0.0) -> None:
        self.note(now)
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def kv_usage(self) -> float:
        held = sum(-(-(r.computed + r.generated) // self.block_size) for r in self.running)
        return min(1.0, held / self.capacity)

    def plan(self) -> tuple[dict[SimRequest, int], float]:
        """This step's tokens per request (admitting waiting ones) and its duration."""
        budget = self.budget
        chosen: dict[SimRequest, int] = {}
        admitting = bool(self.waiting) and len(self.running) < self.max_num_seqs
        cap = max(1, self.budget // 2) if admitting else budget
        for r in sorted(self.running, key=lambda r: r.prefilling):  # decodes first
            if budget == 0:
                break
            n = 1 if not r.prefilling else min(r.prompt_tokens - r.computed, budget, cap)
            chosen[r] = n
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting.popleft()
            self._admit(r)
            n = min(r.prompt_tokens - r.computed, budget)
            chosen[r] = n
            budget -= n
        for r, n in chosen.items():  # budget no newcomer could use goes back to prefills
            if budget and r.prefilling and n > 1:
                extra = min(r.prompt_tokens - r.computed - n, budget)
                chosen[r] = n + extra
                budget -= extra
        prefill = decodes = 0
        pairs = 0.0
        for r, n in chosen.items():
            if r.prefilling:
                prefill += n
                pairs += n * (r.computed + n / 2)  # each new token sees those before it
            else:
                decodes += 1
                pairs += r.prompt_tokens + r.generated
        extra, self.extra_s = self.extra_s, 0.0
        return chosen, self.costs.step(prefill, decodes, pairs) + extra

    def finish_step(self, chosen: dict[SimRequest, int], now: float,
                    duration: float) -> StepResult:
        """Apply a planned step that ended at `now`."""
        result = StepResult(duration)
        self.busy_s += duration
        self.note(now)
        for r, n in chosen.items():
            if r.prefilling:
                r.computed += n
                self._register(r.keys[:r.computed // self.block_size], result)
                if not r.prefilling:
                    r.generated = 1
                    r.first_token_at = r.last_token_at = now
                    result.first_tokens.append(r)
            else:
                r.generated += 1
                r.gaps.append(now - r.last_token_at)
                r.last_token_at = now
            if not r.prefilling and r.generated >= r.answer_tokens:
                self.running.remove(r)
                self.served += 1
                self._register(r.answer_keys, result)
                result.finished.append(r)
        return result

    # ---------------------------------------------------------------- internals

    def _admit(self, r: SimRequest) -> None:
        limit = (r.prompt_tokens - 1) // self.block_size  # leave one token to compute
        matched = 0
        for key in r.keys[:limit]:
            if key not in self.cache:
                break
            self.cache.move_to_end(key)
            matched += 1
        matched = max(matched, min(r.handed, limit))  # handed blocks were loaded for it
        r.computed = r.cached_tokens = matched * self.block_size
        self.running.append(r)

    def _register(self, keys: list[int], result: StepResult) -> None:
        cache = self.cache
        for key in keys:
            if key in cache:
                cache.move_to_end(key)
            else:
                cache[key] = None
                result.stored.append(key)
        while len(cache) > self.capacity:
            key, _ = cache.popitem(last=False)
            result.removed.append(key)
