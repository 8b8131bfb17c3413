"""Fleet simulator: N engine replicas behind M gateways that run the real endpoint picker.

Discrete events on a simulated clock: open-loop Poisson arrivals (each continues the
conversation that has been ready longest, or starts a new one, as `bench/harness/loadgen.py` does),
gateways that pick a replica with `gateway.fleet.picker.EndpointPicker` over their own
`BlockLocator` and `LoadTracker` (the very classes the live gateway runs), replicas that
schedule and cache like the bundled engine (`bench/fleet/sim/replica.py`), scrapes of every
replica's load every `scrape_s`, and, with `prefix+kv`, KV events from every replica to every
gateway after `event_delay_s`. TTFT is the replica's first token minus the arrival, plus a
fixed `overhead_s` for the gateway, HTTP and detokenising. With `cores`, the replicas share
that many cores (as three one-thread replicas share this machine's two): a step lasts
longer by the number of replicas stepping over `cores`, when that is above one.

With `prefill_replicas`, the fleet is split as a gateway with `prefill_endpoints` splits
it: each request is read by a prefill replica (picked among those, `max_tokens: 1`), then,
after the handover (`handover_block_s` a block the decode replica lacks, and the gateway's
second hop, `overhead_s`), decoded by a decode replica that computes only the prompt past
its last full block before the last token and loads the handed blocks on its step thread
(`import_block_s` a block, added to its next step). TTFT is then the decode replica's first
token; the inter-token gaps (`itl_ms`) are those of the answer's tokens wherever they are
written.

Policies: random, round_robin, least_loaded, session, prefix (the gateway's own record of
what it sent where), prefix+kv (the same with KV events). Scenarios and the calibration
against live runs: `bench/fleet/sim/report.py`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.fleet.sim.replica import SimReplica, SimRequest, StepCosts
from bench.fleet.sim.workloads import SimSession, TraceSizes, answer_ids, build
from bench.fleet.sim.workloads import sessions as trace
from bench.harness.loadgen import poisson_arrivals
from bench.harness.stats import percentile
from bench.harness.workloads import WorkloadSizes
from gateway.fleet.block_keys import block_keys
from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.load import LoadTracker, Ticket
from gateway.fleet.picker import EndpointPicker, PickerSettings

SIM_POLICIES = ("random", "round_robin", "least_loaded", "session", "prefix", "prefix+kv")


@dataclass
class SimConfig:
    replicas: int = 3
    gateways: int = 1
    policy: str = "prefix"
    workload: str = "chat"
    rate: float = 4.0  # requests per second
    duration_s: float = 60.0
    warmup_s: float = 10.0
    drain_s: float = 60.0
    seed: int = 0  # arrivals and users (as LoadConfig.seed)
    pool_seed: int | None = None  # shared prefixes (default: seed)
    capacity_blocks: int = 4096  # each replica's KV cache
    block_size: int = 16
    max_num_seqs: int = 16
    budget: int = 512
    costs: StepCosts = field(default_factory=StepCosts)
    overhead_s: float = 0.004
    cores: float | None = None  # replicas share this many cores (a step slows when more run)
    scrape_s: float = 1.0
    event_delay_s: float = 0.005
    prime: bool = True  # read each group's prefix once before the run, as the live bench does
    sizes: TraceSizes = field(default_factory=TraceSizes)
    live_sizes: WorkloadSizes | None = None  # chat_live: the live run's workload sizes
    picker: PickerSettings | None = None
    # prefill/decode disaggregation: the first `prefill_replicas` read prompts (max_tokens 1),
    # the rest decode from the handed blocks; 0: every replica does both (colocated)
    prefill_replicas: int = 0
    handover_block_s: float = 0.0  # seconds to hand a decode replica one block (fetch + load)
    import_block_s: float = 0.0  # of which its step thread spends loading it


@dataclass
class SimResult:
    config: SimConfig
    requests: int
    ttft_ms: dict[str, float]
    hit_ratio: float  # cached prompt tokens / prompt tokens
    busy_max_over_mean: float  # replicas' time spent stepping, busiest over mean
    served_max_over_mean: float  # requests served, busiest replica over mean
    held_max_over_mean: float  # requests held (queued or running) on average over the run
    utilization: float  # the replicas' mean share of the run spent stepping
    unfinished: int
    itl_ms: dict[str, float] = field(default_factory=dict)  # gaps between answer tokens

    def p95(self) -> float:
        return self.ttft_ms["p95"]

    def row(self) -> dict:
        c = self.config
        return {"replicas": c.replicas, "gateways": c.gateways, "policy": c.policy,
                "workload": c.workload, "rate": c.rate, "requests": self.requests,
                **{f"ttft_{k}_ms": v for k, v in self.ttft_ms.items()},
                "hit_ratio": round(self.hit_ratio, 4),
                "busy_max_over_mean": round(self.busy_max_over_mean, 3),
                "served_max_over_mean": round(self.served_max_over_mean, 3),
                "held_max_over_mean": round(self.held_max_over_mean, 3),
                "utilization": round(self.utilization, 3),
                "unfinished": self.unfinished,
                **{f"itl_{k}_ms": v for k, v in self.itl_ms.items()},
                **({"prefill_replicas": c.prefill_replicas} if c.prefill_replicas else {})}


class _Gateway:
    def __init__(self, config: SimConfig, index: int) -> None:
        policy = "prefix" if config.policy == "prefix+kv" else config.policy
        settings = config.picker or PickerSettings(block_size=config.block_size)
        self.picker = EndpointPicker(policy, settings, BlockLocator(config.capacity_blocks),
                                     random.Random(f"{config.seed}:gw{index}"))
        self.tracker = LoadTracker()


@dataclass(eq=False)
class _Record:
    session: SimSession
    turn: int
    gateway: _Gateway
    ticket: Ticket
    answer: list[int]
    measured: bool
    primer: bool = False
    ttft_s: float | None = None
    cached: int = 0  # prompt tokens the replica had cached
    prompt: int = 0
    gaps: list[float] = field(default_factory=list)  # between the answer's tokens
    prefilling_at: str | None = None  # disaggregated: the prefill replica reading it
    decode: SimRequest | None = None  # disaggregated: the request the decode pool gets


class FleetSim:
    """One run; `run()` returns its `SimResult`."""

    def __init__(self, config: SimConfig, after: FleetSim | None = None) -> None:
        """`after`: continue on that run's replicas and gateways (their caches, records and
        sessions), as a live bench's runs follow each other on the same processes."""
        self.c = config
        self.rng = random.Random(f"sim:{config.seed}")
        self.names = [f"r{i:03d}" for i in range(config.replicas)]
        split = config.prefill_replicas
        if not 0 <= split < config.replicas:
            raise ValueError(f"prefill_replicas {split} must leave decode replicas of "
                             f"{config.replicas}")
        self.prefill_names, self.decode_names = (self.names[:split], self.names[split:]) \
            if split else ([], self.names)
        if after is None:
            self.replicas = {n: SimReplica(n, config.costs, config.capacity_blocks,
                                           config.block_size, config.max_num_seqs, config.budget)
                             for n in self.names}
            self.gateways = [_Gateway(config, i) for i in range(config.gateways)]
        else:
            self.replicas = {n: r.fresh_counters() for n, r in after.replicas.items()}
            self.gateways = after.gateways
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._ready: list[tuple[float, int, SimSession, int]] = []  # sessions between turns
        self.records: list[_Record] = []
        self.kv = config.policy == "prefix+kv"
        self._prefix_keys: dict[int, list[int]] = {}  # a shared prefix's block keys
        self._known: dict[str, list[int]] = {}  # a session's keys so far (its last answer's)
        self._stepping = 0  # replicas with a step under way
        self._fresh = after is None

    # ---------------------------------------------------------------- the clock

    def at(self, t: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, action))

    def run(self) -> SimResult:
        c = self.c
        horizon = c.warmup_s + c.duration_s
        arrivals = poisson_arrivals(c.rate, horizon, c.seed)
        sessions = trace(c.workload, c.seed, c.sizes, c.pool_seed, c.live_sizes)
        primers = self._primers(c) if c.prime and self._fresh else []
        start = 0.0
        for session in primers:  # one at a time, long enough apart to finish
            self.at(start, lambda s=session: self._send(s, 0, measured=False, answer_tokens=1))
            start += 2.0
        for name in self.names:
            for gateway in self.gateways:
                gateway.picker.locator.set_capacity(name, c.capacity_blocks)
        for t in arrivals:
            self.at(start + t, lambda t=start + t: self._arrive(sessions, t >= start + c.warmup_s))
        self._scrape_every(c.scrape_s, start + horizon)
        end = start + horizon + c.drain_s
        while self._events and self._events[0][0] <= end:
            self.now, _, action = heapq.heappop(self._events)
            action()
        return self._result()

    # ---------------------------------------------------------------- traffic

    def _primers(self, c: SimConfig) -> list[SimSession]:
        seen: dict[str, SimSession] = {}
        for s in build(c.workload, 200, c.seed + 7919, c.sizes, c.pool_seed, c.live_sizes):
            seen.setdefault(s.group, s)
        return [seen[g] for g in sorted(seen)]

    def _arrive(self, sessions, measured: bool) -> None:
        if self._ready and self._ready[0][0] <= self.now:
            _, _, session, turn = heapq.heappop(self._ready)
        else:
            session, turn = next(sessions, None), 0
            if session is None:
                return
        self._send(session, turn, measured)

    def _send(self, session: SimSession, turn: int, measured: bool,
              answer_tokens: int | None = None) -> None:
        c = self.c
        prompt = session.prompt(turn)
        answer = answer_ids(session, self.rng)
        known = self._known.get(session.id)
        if known is None:  # a session's first turn starts from its group's prefix
            known = self._prefix_keys.get(id(session.prefix))
            if known is None:
                known = self._prefix_keys[id(session.prefix)] = block_keys(session.prefix,
                                                                          c.block_size)
        keys = _extend(known, prompt, c.block_size)
        gateway = self.gateways[self.rng.randrange(len(self.gateways))]
        sid = session.id if len(session.turns) > 1 else None
        pool = self.prefill_names or self.decode_names
        pick = gateway.picker.pick(pool, gateway.tracker.loads, keys=keys,
                                   prompt_tokens=len(prompt), session_id=sid)
        gateway.picker.record(pick, keys, sid)
        ticket = gateway.tracker.sent(pick.endpoint, pick.new_tokens)
        record = _Record(session, turn, gateway, ticket, answer, measured,
                         primer=answer_tokens is not None)
        self.records.append(record)
        n_answer = answer_tokens or session.answer_tokens
        answer_keys = _extend(keys, prompt + answer[:n_answer], c.block_size)
        if len(session.turns) > 1 and answer_tokens is None:
            self._known[session.id] = answer_keys  # the next turn's prompt starts so
        request = SimRequest(keys, answer_keys, len(prompt), n_answer, self.now, record)
        if self.prefill_names:  # read there first (max_tokens 1), then decoded
            record.decode, record.prefilling_at = request, pick.endpoint
            request = SimRequest(keys, keys, len(prompt), 1, self.now, record)
        self._submit(self.replicas[pick.endpoint], request)

    def _submit(self, replica: SimReplica, request: SimRequest) -> None:
        replica.submit(request, self.now)
        if not replica.stepping:
            self._step(replica)

    def _hand_over(self, record: _Record) -> None:
        """A prefill replica has read `record`'s prompt: pick a decode replica, which gets
        the request once the blocks it lacks are handed over (and loads them between two
        of its steps)."""
        c, request = self.c, record.decode
        gateway, sid = record.gateway, record.session.id if len(record.session.turns) > 1 \
            else None
        pick = gateway.picker.pick(self.decode_names, gateway.tracker.loads, keys=request.keys,
                                   prompt_tokens=request.prompt_tokens, session_id=sid)
        gateway.picker.record(pick, request.keys, sid)
        record.ticket = gateway.tracker.sent(pick.endpoint, pick.new_tokens)
        replica = self.replicas[pick.endpoint]
        request.handed = (request.prompt_tokens - 1) // c.block_size
        held = 0
        for key in request.keys[:request.handed]:
            if key not in replica.cache:
                break
            held += 1
        fetched = request.handed - held

        def arrive() -> None:
            replica.extra_s += fetched * c.import_block_s
            self._submit(replica, request)

        self.at(self.now + c.overhead_s + fetched * c.handover_block_s, arrive)

    def _step(self, replica: SimReplica) -> None:
        chosen, duration = replica.plan()
        if not chosen:
            if replica.stepping:
                replica.stepping = False
                self._stepping -= 1
            return
        if not replica.stepping:
            replica.stepping = True
            self._stepping += 1
        if self.c.cores:  # replicas sharing too few cores each run slower
            duration *= max(1.0, self._stepping / self.c.cores)
        self.at(self.now + duration, lambda: self._step_done(replica, chosen, duration))

    def _step_done(self, replica: SimReplica, chosen, duration: float) -> None:
        result = replica.finish_step(chosen, self.now, duration)
        for request in result.first_tokens:
            record: _Record = request.payload
            record.gateway.tracker.first_token(record.ticket)
            if record.decode is None or record.decode is not request:
                # the hit ratio counts the replica that read the prompt (a decode replica's
                # handed blocks are no hit)
                record.cached, record.prompt = request.cached_tokens, request.prompt_tokens
            if record.decode is not None and record.decode is not request:
                continue  # the prefill's own token: the client's first comes from decode
            record.ttft_s = self.now - request.arrival + self.c.overhead_s
        for request in result.finished:
            record = request.payload
            record.gateway.tracker.finished(record.ticket)
            if record.decode is not None and record.decode is not request:
                self._hand_over(record)
                continue
            record.gaps = request.gaps
            session = record.session
            if record.turn == len(session.answers):
                session.answers.append(record.answer)
            if not record.primer:
                self._next_turn(session, record.turn + 1)
        if self.kv and (result.stored or result.removed):
            stored, removed = result.stored, result.removed
            self.at(self.now + self.c.event_delay_s,
                    lambda: self._deliver(replica.name, stored, removed))
        self._step(replica)

    def _next_turn(self, session: SimSession, turn: int) -> None:
        if turn >= len(session.turns):
            return
        think = self.rng.expovariate(1.0 / session.think_s) if session.think_s > 0 else 0.0
        self._seq += 1
        heapq.heappush(self._ready, (self.now + think, self._seq, session, turn))

    def _deliver(self, name: str, stored: list[int], removed: list[int]) -> None:
        for gateway in self.gateways:
            gateway.picker.locator.add(name, stored)
            gateway.picker.locator.remove(name, removed)

    def _scrape_every(self, period: float, until: float) -> None:
        def scrape() -> None:
            for gateway in self.gateways:
                for name, r in self.replicas.items():
                    gateway.tracker.observe(name, len(r.running), len(r.waiting), r.kv_usage())
            if self.now + period <= until:
                self.at(self.now + period, scrape)
        self.at(period, scrape)

    # ---------------------------------------------------------------- results

    def _result(self) -> SimResult:
        measured = [r for r in self.records if r.measured]
        ttfts = [r.ttft_s if r.ttft_s is not None else math.inf for r in measured]
        done = [r for r in measured if r.ttft_s is not None]
        prompt = sum(r.prompt for r in done)
        cached = sum(r.cached for r in done)
        busy = [r.busy_s for r in self.replicas.values()]
        served = [r.served for r in self.replicas.values()]
        for r in self.replicas.values():
            r.note(self.now)
        held = [r.held_area for r in self.replicas.values()]
        gaps = [g for r in measured for g in r.gaps]
        return SimResult(
            self.c, len(measured),
            {f"p{p}": _ms(percentile(ttfts, p)) for p in (50, 95, 99)},
            cached / prompt if prompt else 0.0, _max_over_mean(busy), _max_over_mean(served),
            _max_over_mean(held), sum(busy) / len(busy) / max(self.now, 1e-9),
            sum(r.ttft_s is None for r in measured),
            {f"p{p}": _ms(percentile(gaps, p)) for p in (50, 95, 99)} if gaps else {})


def _extend(known: list[int], tokens: list[int], block_size: int) -> list[int]:
    """Block keys of `tokens`, which start with the blocks `known` keys (not recomputed)."""
    n = len(known)
    return known + block_keys(tokens[n * block_size:], block_size,
                              parent=known[-1] if known else None)


def _ms(seconds: float | None) -> float:
    if seconds is None or math.isinf(seconds):
        return math.inf
    return round(seconds * 1000.0, 1)


def _max_over_mean(values: list[float]) -> float:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean else 0.0


def simulate(config: SimConfig) -> SimResult:
    return FleetSim(config).run()
