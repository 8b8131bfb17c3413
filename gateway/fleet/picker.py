"""The endpoint picker: which replica of a fleet gets a request.

Pure code (no I/O, no clock): the gateway (`gateway/upstreams/fleet.py`) and the fleet
simulator (`bench/fleet/sim/simulator.py`) run this same class. Inputs are typed: the prompt's block
keys as the engine will see them (after the gateway's transforms; `block_keys.py`), its
token count, the session id, and each candidate's `EndpointLoad`.

`prefix` (the default with several endpoints) estimates, per replica, what the request
would wait for there, in prompt tokens to compute:

    cost = uncached prompt tokens (prompt - the blocks the replica holds, `BlockLocator`)
         + tier_reload_cost x the prompt tokens of held blocks it would load back from
           its second tier rather than read in its pool
         + prompt tokens still to compute for requests queued ahead of it
         + decode_cost_tokens per request decoding there
         - session_bonus_tokens where the request's session went last

and takes the cheapest. Costs within `tie_tokens` of the best tie; ties go to the replica
a rendezvous hash of the session id (else of a block near the prompt's start) ranks first,
so gateways that share no state still place a new prefix or session alike; but when every
tied replica holds as much of the prompt, the cheapest of them takes it (the hash ranks
equals), since spreading then loses no cache hit. An imbalance
override drops any replica with `imbalance_ratio` x the mean requests + `imbalance_slack`
or more, so a hot prefix spills to other replicas (which then hold it too) instead of
queueing on one; and, since requests in flight are few when a large fleet is lightly
loaded, it also drops a replica that has any request in flight and took `share_ratio` x the
mean share of the last `share_window` picks per candidate + 1 or more: a hot prefix then
spreads over enough replicas that none works twice as hard as the mean, while an idle
replica is never passed over (moving a long document would cost more than it saves).
`session` keeps each session on its rendezvous replica (unless overloaded), `least_loaded`
takes the fewest requests, `round_robin` and `random` ignore everything.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.load import EndpointLoad

Policy = Literal["prefix", "session", "least_loaded", "round_robin", "random"]
POLICIES: tuple[Policy, ...] = ("prefix", "session", "least_loaded", "round_robin", "random")
MAX_SESSIONS = 65_536
_IDLE = EndpointLoad()


@dataclass
class PickerSettings:
    """The cost model's weights; defaults fit the bundled engine on a CPU (bench/fleet/sim/simulator.py)."""

    block_size: int = 16
    decode_cost_tokens: float = 16.0  # what one decoding request costs a newcomer's prefill
    queued_request_tokens: float = 256.0  # another gateway's queued request, size unknown
    session_bonus_tokens: float = 64.0
    tie_tokens: float = 32.0
    affinity_blocks: int = 8  # without a session: the block whose hash breaks ties
    imbalance_ratio: float = 1.5
    imbalance_slack: float = 2.0
    share_ratio: float = 1.75  # recent picks over the mean that pass a replica over
    share_window: int = 16  # picks remembered per candidate for that bar
    kv_high: float = 0.95  # KV use above this: the replica would evict or preempt
    # a block in a replica's second tier, against computing it: loading it back and saving
    # the blocks that makes room for, 2-4% of a 2,000-token recompute (bench/engine/tier_bench.py)
    tier_reload_cost: float = 0.03


@dataclass
class Pick:
    """The picker's answer: where, why, and what it expects the replica to compute."""

    endpoint: str
    reason: str  # prefix | session | least_loaded | round_robin | random | override
    matched_blocks: int = 0
    new_tokens: int = 0


def rendezvous(key: str, candidates: Sequence[str]) -> str:
    """The candidate a highest-random-weight hash ranks first for `key`: the same answer on
    every gateway, and only keys of a replica that leaves move."""
    def weight(endpoint: str) -> bytes:
        return hashlib.blake2b(f"{key}|{endpoint}".encode(), digest_size=8).digest()
    return max(candidates, key=weight)


class EndpointPicker:
    def __init__(self, policy: Policy = "prefix", settings: PickerSettings | None = None,
                 locator: BlockLocator | None = None, rng: random.Random | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown balance policy {policy!r}; one of {', '.join(POLICIES)}")
        self.policy = policy
        self.settings = settings or PickerSettings()
        self.locator = locator or BlockLocator()
        self.rng = rng or random.Random(0)
        self.sessions: OrderedDict[str, str] = OrderedDict()  # session -> where it went last
        self._turn = 0
        self._recent: deque[str] = deque()  # where the last picks went, oldest first
        self._recent_counts: Counter[str] = Counter()

    def pick(self, candidates: Sequence[str], loads: Mapping[str, EndpointLoad], *,
             keys: Sequence[int] = (), prompt_tokens: int = 0,
             session_id: str | None = None) -> Pick:
        """The endpoint for one request among `candidates` (healthy, not yet tried)."""
        if not candidates:
            raise ValueError("no endpoint to pick from")
        self._turn += 1
        if self.policy == "round_robin":
            return Pick(candidates[self._turn % len(candidates)], "round_robin",
                        new_tokens=prompt_tokens)
        if self.policy == "random":
            return Pick(self.rng.choice(list(candidates)), "random", new_tokens=prompt_tokens)
        if self.policy == "least_loaded" or (self.policy == "session" and not session_id):
            return Pick(self._least_loaded(candidates, loads), "least_loaded",
                        new_tokens=prompt_tokens)
        allowed = self._not_overloaded(candidates, loads)
        if self.policy == "session":
            assert session_id is not None
            first = rendezvous(session_id, candidates)
            if first in allowed:
                return Pick(first, "session", new_tokens=prompt_tokens)
            return Pick(self._least_loaded(allowed, loads), "override", new_tokens=prompt_tokens)
        return self._by_cost(candidates, allowed, loads, keys, prompt_tokens, session_id)

    def record(self, pick: Pick, keys: Sequence[int], session_id: str | None = None) -> None:
        """The request went to `pick.endpoint`: its prompt will be cached there."""
        if keys:
            self.locator.add(pick.endpoint, keys)
        self._recent.append(pick.endpoint)
        self._recent_counts[pick.endpoint] += 1
        if session_id:
            self.sessions[session_id] = pick.endpoint
            self.sessions.move_to_end(session_id)
            if len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)

    def forget(self, endpoint: str) -> None:
        """`endpoint` left or restarted: nothing is cached there any more."""
        self.locator.clear(endpoint)

    # ---------------------------------------------------------------- internals

    def _by_cost(self, candidates: Sequence[str], allowed: list[str],
                 loads: Mapping[str, EndpointLoad], keys: Sequence[int], prompt_tokens: int,
                 session_id: str | None) -> Pick:
        s = self.settings
        matched = self.locator.matches(keys) if keys else {}
        last = self.sessions.get(session_id) if session_id else None
        costs: dict[str, float] = {}
        for endpoint in candidates:
            load = loads.get(endpoint, _IDLE)
            held = matched.get(endpoint, 0)
            new = max(0, prompt_tokens - held * s.block_size)
            if held:
                new += (s.tier_reload_cost * s.block_size
                        * self.locator.in_tier_only(endpoint, keys[:held]))
            cost = (new + load.pending_tokens + s.queued_request_tokens * load.others_waiting
                    + s.decode_cost_tokens * load.decoding)
            if load.kv_usage > s.kv_high:
                cost += prompt_tokens
            if endpoint == last:
                cost -= s.session_bonus_tokens
            costs[endpoint] = cost
        best = min(costs[e] for e in allowed)
        tied = [e for e in allowed if costs[e] <= best + s.tie_tokens]
        if len(tied) == 1:
            endpoint = tied[0]
        elif last in tied:
            endpoint = last
        elif len({matched.get(e, 0) for e in tied}) == 1 and matched.get(tied[0], 0):
            # all hold as much of the prompt: nothing to keep together, take the cheapest
            low = min(costs[e] for e in tied)
            endpoint = rendezvous(self._affinity_key(keys, session_id),
                                  [e for e in tied if costs[e] == low])
        else:
            endpoint = rendezvous(self._affinity_key(keys, session_id), tied)
        held = matched.get(endpoint, 0)
        if min(costs.values()) + s.tie_tokens < best:
            reason = "override"  # an overloaded replica would have been cheaper
        else:
            reason = "prefix" if held else "session" if endpoint == last else "least_loaded"
        return Pick(endpoint, reason, held, max(0, prompt_tokens - held * s.block_size))

    def _affinity_key(self, keys: Sequence[int], session_id: str | None) -> str:
        if session_id:
            return session_id
        if keys:
            return str(keys[min(len(keys), self.settings.affinity_blocks) - 1])
        return str(self._turn)  # nothing to keep together: spread

    def _not_overloaded(self, candidates: Sequence[str],
                        loads: Mapping[str, EndpointLoad]) -> list[str]:
        """Candidates below both imbalance bars, requests in flight and (for a replica with
        any) share of the recent picks; all of them when every one is above."""
        s = self.settings
        counts = [loads.get(e, _IDLE).requests for e in candidates]
        bar = s.imbalance_ratio * sum(counts) / len(counts) + s.imbalance_slack
        window = s.share_window * len(candidates)
        while len(self._recent) > window:
            self._recent_counts[self._recent.popleft()] -= 1
        picks = [self._recent_counts.get(e, 0) for e in candidates]
        share_bar = (s.share_ratio * sum(picks) / len(picks) + 1
                     if len(self._recent) >= window else float("inf"))
        allowed = [e for e, n, k in zip(candidates, counts, picks, strict=True)
                   if n < bar and (k < share_bar or n == 0)]
        return allowed or list(candidates)

    def _least_loaded(self, candidates: Sequence[str], loads: Mapping[str, EndpointLoad]) -> str:
        """Fewest requests; ties taken in turn so equal replicas share the traffic."""
        n = len(candidates)
        order = [candidates[(self._turn + i) % n] for i in range(n)]
        return min(order, key=lambda e: (loads.get(e, _IDLE).requests,
                                          loads.get(e, _IDLE).pending_tokens))
