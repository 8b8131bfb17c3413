"""Priority classes under load: batch work at twice the engine's capacity, interactive
requests beside it, first come first served against `--scheduling-policy priority`.

    OMP_NUM_THREADS=2 python -m bench.engine.priority_bench [--duration 90] [--repeats 1]
        [--quick] [--out DIR]

One in-process engine per policy on the same weights, driven by one open-loop trace
(Poisson arrivals, fresh random prompts): batch requests (priority 10 under the priority
policy) at `batch_load` times the capacity measured first (batch requests alone, saturated),
interactive ones (priority 0) at `chat_rate` per second. A request's clock starts at its
scheduled arrival, so a step it arrived during counts against it. Reported against the
goals of issue 40:
- interactive p95 TTFT under the priority policy over their TTFT on an idle engine <= 1.5,
  read two ways: over the median of single interactive requests on an idle engine
  (measured before and after the loaded runs, in the same process), and over the p95 of
  the same interactive arrivals replayed with no batch work (where two that arrive close
  together wait for each other as they do under load);
- batch throughput under priority over FCFS >= 0.9, read two ways: batch tokens generated
  inside the window (raw), and the work the engine did for every class (prompt tokens of
  the requests that reached their first token plus tokens generated; recomputation after a
  preemption is not work). On this CPU the interactive stream is a fair share of the
  engine, and FCFS leaves the interactive requests that arrive after the backlog builds
  unserved inside the window, so the raw figure charges the priority run for serving them;
  the work ratio is what scheduling by priority costs (and batch work alone, with no
  interactive request, at priority 10 under the priority policy, against its capacity
  under fcfs: what the policy costs when there is nothing to put first);
- preemptions per request at equal priority (the FCFS run, where every request is priority
  0, and the priority run's preemptions for blocks) <= 1.
With `--repeats N` the rounds are also pooled: the p95 of every round's interactive TTFTs
over the median of every idle sample, and all work over all work. The p95 of one round's
30-50 requests rests on its two or three slowest, which is where two arrivals land close
together (the second waits for the first's prompt, on an idle engine too: the replay alone
says how much of a round's p95 that is).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.engine.timing import random_prompt
from bench.harness.stats import percentile

BATCH, CHAT = "batch", "chat"
CHAT_MARGIN_S = 5.0  # no interactive arrival this close to the end: each has time to start


@dataclass
class Workload:
    batch_prompt: int = 512
    batch_tokens: int = 128
    chat_prompt: int = 256
    chat_tokens: int = 32
    chat_rate: float = 0.5  # interactive requests a second
    batch_load: float = 2.0  # batch arrivals as a multiple of the measured capacity
    duration_s: float = 90.0
    capacity_s: float = 90.0
    idle_samples: int = 8
    seed: int = 0

    @classmethod
    def quick(cls) -> Workload:
        return cls(batch_prompt=128, batch_tokens=32, chat_prompt=64, chat_tokens=8,
                   chat_rate=1.0, duration_s=20.0, capacity_s=20.0, idle_samples=3)


@dataclass
class Arrival:
    at: float  # seconds from the start of the run
    kind: str
    prompt: list[int]
    max_tokens: int


@dataclass
class Record:
    kind: str
    prompt: int
    ttft_s: float | None = None
    tokens: int = 0  # generated inside the window
    preemptions: int = 0

    @property
    def work(self) -> int:
        """Tokens computed for this request once each: its prompt once read, its answer."""
        return self.tokens + (self.prompt if self.ttft_s is not None else 0)


@dataclass
class RunResult:
    policy: str
    records: list[Record] = field(default_factory=list)
    preemptions: int = 0
    priority_preemptions: int = 0
    cut_steps: int = 0  # steps of batch work stopped between layers for a chat

    def of(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]

    def ttfts(self, kind: str) -> list[float]:
        """First-token times, infinite for a request that got none inside the window."""
        return [math.inf if r.ttft_s is None else r.ttft_s for r in self.of(kind)]


def trace(w: Workload, batch_rate: float, seed: int) -> list[Arrival]:
    """Poisson arrivals of both kinds over the window, in time order."""
    rng = random.Random(seed)
    out = []
    for kind, rate, n, tokens, end in (
            (BATCH, batch_rate, w.batch_prompt, w.batch_tokens, w.duration_s),
            (CHAT, w.chat_rate, w.chat_prompt, w.chat_tokens, w.duration_s - CHAT_MARGIN_S)):
        t = rng.expovariate(rate)
        while t < end:
            out.append(Arrival(t, kind, random_prompt(n, rng.randrange(1 << 30)), tokens))
            t += rng.expovariate(rate)
    return sorted(out, key=lambda a: a.at)


def drive(engine, arrivals: list[Arrival], duration_s: float, priorities: dict[str, int],
          on_tokens=None) -> list[Record]:
    """Run `arrivals` open loop on `engine` (an LLMEngine) for `duration_s`; what is left
    then is aborted. Arrivals are added between steps, stamped with their scheduled time,
    and announced when they happen (`LLMEngine.note_arrival`, from a thread, as the
    AsyncEngine does when a request is posted), so a step of worse classes may stop for
    a better one."""
    from engine.sampling_params import SamplingParams

    records: dict[str, Record] = {}
    seqs = {}
    start = time.monotonic()
    done = threading.Event()

    def announce() -> None:
        for a in arrivals:
            if done.wait(max(0.0, start + a.at - time.monotonic())):
                return
            engine.note_arrival(priorities[a.kind])

    threading.Thread(target=announce, daemon=True).start()
    i = 0
    while (now := time.monotonic() - start) < duration_s:
        while i < len(arrivals) and arrivals[i].at <= now:
            a = arrivals[i]
            rid = f"{a.kind}-{i}"
            params = SamplingParams(max_tokens=a.max_tokens, temperature=0, ignore_eos=True)
            seq = engine.make_sequence(a.prompt, params, rid)
            seq.arrival_time = start + a.at
            seq.priority = priorities[a.kind]
            engine.add_sequence(seq)
            records[rid], seqs[rid] = Record(a.kind, len(a.prompt)), seq
            i += 1
        if not engine.has_unfinished():
            if i == len(arrivals):
                break
            time.sleep(max(0.0, min(arrivals[i].at - now, duration_s - now)))
            continue
        for delta in engine.step():
            if on_tokens is not None:
                on_tokens([time.monotonic() - start] * len(delta.token_ids))
            record = records[delta.request_id]
            if delta.ttft_s is not None:
                record.ttft_s = delta.ttft_s
            record.tokens += len(delta.token_ids)
    done.set()
    for rid, seq in seqs.items():
        records[rid].preemptions = seq.num_preemptions
        engine.abort(rid)
    return list(records.values())


def capacity(engine, w: Workload, seed: int, priority: int = 0) -> tuple[float, int]:
    """Batch requests a second the engine finishes when saturated with them alone: batch
    tokens generated over the last two thirds of `capacity_s` (the first wave of prompts
    read, the running set in its steady mix of prefill and decode), per request's tokens;
    and the work done over the whole of it (`Record.work`)."""
    rng = random.Random(seed)
    backlog = [Arrival(0.0, BATCH, random_prompt(w.batch_prompt, rng.randrange(1 << 30)),
                       w.batch_tokens) for _ in range(400)]
    stamps: list[float] = []
    records = drive(engine, backlog, w.capacity_s, {BATCH: priority}, on_tokens=stamps.extend)
    settled = w.capacity_s / 3
    rate = sum(1 for t in stamps if t >= settled) / w.batch_tokens / (w.capacity_s - settled)
    return rate, sum(r.work for r in records)


def idle_ttfts(engine, w: Workload, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(w.idle_samples):
        one = [Arrival(0.0, CHAT, random_prompt(w.chat_prompt, rng.randrange(1 << 30)), 1)]
        out += [r.ttft_s for r in drive(engine, one, 30.0, {CHAT: 0}) if r.ttft_s is not None]
        while engine.has_unfinished():
            engine.step()
    return out


def run(w: Workload, repeats: int) -> dict:
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.weights import load_model

    loaded = load_model(None, "auto", "cpu")
    engines = {p: LLMEngine(EngineConfig(scheduling_policy=p), loaded=loaded)
               for p in ("fcfs", "priority")}
    fcfs = engines["fcfs"]
    idle_ttfts(fcfs, Workload(idle_samples=2, chat_prompt=w.chat_prompt), w.seed - 1)  # warm
    cap, fcfs_work = capacity(fcfs, w, w.seed - 2)
    print(f"[priority_bench] capacity {cap:.3f} batch req/s", flush=True)
    batch_alone = capacity(engines["priority"], w, w.seed - 2, priority=10)[1] / fcfs_work
    print(f"[priority_bench] batch work alone, priority / fcfs: {batch_alone:.3f}", flush=True)
    rounds = []
    pooled: dict[str, list[float]] = {"chat": [], "idle": [], "alone": [], "work_fcfs": [],
                                      "work_priority": []}
    for r in range(repeats):
        arrivals = trace(w, w.batch_load * cap, w.seed + r)
        idle = idle_ttfts(fcfs, w, w.seed + 100 + r)
        order = ("fcfs", "priority") if r % 2 == 0 else ("priority", "fcfs")
        runs = {}
        for policy in order:
            prio = {BATCH: 10 if policy == "priority" else 0, CHAT: 0}
            engine = engines[policy]
            before = (engine.scheduler.num_preemptions, engine.scheduler.num_priority_preemptions,
                      engine.num_interrupted_steps)
            result = RunResult(policy, drive(engine, arrivals, w.duration_s, prio))
            result.preemptions = engine.scheduler.num_preemptions - before[0]
            result.priority_preemptions = engine.scheduler.num_priority_preemptions - before[1]
            result.cut_steps = engine.num_interrupted_steps - before[2]
            runs[policy] = result
            print(f"[priority_bench] round {r} {policy}: chat p95 "
                  f"{ms(percentile(result.ttfts(CHAT), 95))}", flush=True)
        idle += idle_ttfts(fcfs, w, w.seed + 200 + r)
        fresh = random.Random(w.seed + 300 + r)  # the same times, prompts never cached
        chats = [Arrival(a.at, CHAT, random_prompt(len(a.prompt), fresh.randrange(1 << 30)),
                         a.max_tokens) for a in arrivals if a.kind == CHAT]
        alone = [math.inf if x.ttft_s is None else x.ttft_s
                 for x in drive(engines["priority"], chats, w.duration_s, {CHAT: 0})]
        rounds.append(summary(runs, idle, alone))
        pooled["chat"] += runs["priority"].ttfts(CHAT)
        pooled["idle"] += idle
        pooled["alone"] += alone
        for p in runs:
            pooled[f"work_{p}"].append(sum(rec.work for rec in runs[p].records))
    return {"workload": asdict(w), "capacity_req_s": cap, "batch_alone_work_ratio": batch_alone,
            "pooled": pooled_summary(pooled), "rounds": rounds}


def pooled_summary(pooled: dict[str, list[float]]) -> dict:
    idle_p50 = percentile(pooled["idle"], 50)
    return {"chat_requests": len(pooled["chat"]), "idle_ttft_p50_s": idle_p50,
            "chat_ttft_p95_s": percentile(pooled["chat"], 95),
            "chat_p95_over_idle": percentile(pooled["chat"], 95) / idle_p50,
            "chat_alone_p95_over_idle": percentile(pooled["alone"], 95) / idle_p50,
            "work_ratio": sum(pooled["work_priority"]) / sum(pooled["work_fcfs"])}


def summary(runs: dict[str, RunResult], idle: list[float], alone: list[float]) -> dict:
    fcfs, prio = runs["fcfs"], runs["priority"]
    idle_p50 = percentile(idle, 50)
    chat_p95 = percentile(prio.ttfts(CHAT), 95)
    batch_tokens = {p: sum(r.tokens for r in runs[p].of(BATCH)) for p in runs}
    work = {p: sum(r.work for r in runs[p].records) for p in runs}
    return {
        "idle_ttft_p50_s": idle_p50, "idle_ttft_p95_s": percentile(idle, 95),
        "chat_ttft_p50_s": {p: percentile(runs[p].ttfts(CHAT), 50) for p in runs},
        "chat_ttft_p95_s": {p: percentile(runs[p].ttfts(CHAT), 95) for p in runs},
        "chat_requests": len(prio.of(CHAT)),
        "chat_p95_over_idle": chat_p95 / idle_p50,
        "chat_alone_ttft_p95_s": percentile(alone, 95),
        "chat_p95_over_alone_p95": chat_p95 / percentile(alone, 95),
        "batch_tokens": batch_tokens,
        "batch_throughput_ratio": batch_tokens["priority"] / batch_tokens["fcfs"],
        "chat_served": {p: sum(r.ttft_s is not None for r in runs[p].of(CHAT)) for p in runs},
        "work_tokens": work,
        "work_ratio": work["priority"] / work["fcfs"],
        "preemptions": {p: runs[p].preemptions for p in runs},
        "priority_preemptions": prio.priority_preemptions,
        "cut_steps_priority": prio.cut_steps,
        "max_preemptions_per_request_fcfs": max((r.preemptions for r in fcfs.records),
                                                default=0),
        "block_preemptions_priority": prio.preemptions - prio.priority_preemptions,
        "max_preemptions_per_batch_request_priority": max(
            (r.preemptions for r in prio.of(BATCH)), default=0),
    }


def ms(seconds: float) -> str:
    return "unserved" if math.isinf(seconds) else f"{seconds * 1000:.0f} ms"


def report(result: dict) -> str:
    lines = ["| round | idle TTFT p50 | chat p95 FCFS | chat p95 priority | p95 / idle "
             "(<= 1.5) | batch tokens priority / FCFS | work priority / FCFS (>= 0.9) | "
             "chats served FCFS, priority | equal priority: max preemptions per request in "
             "the FCFS run, preemptions for blocks in the priority run (<= 1) | preemptions "
             "for a better class (most of one batch request) | batch steps cut for a chat | "
             "chat p50 priority | chats alone: p95 | p95 / alone p95 (<= 1.5) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(result["rounds"]):
        equal = f"{r['max_preemptions_per_request_fcfs']}, {r['block_preemptions_priority']}"
        lines.append(
            f"| {i} | {ms(r['idle_ttft_p50_s'])} | {ms(r['chat_ttft_p95_s']['fcfs'])} | "
            f"{ms(r['chat_ttft_p95_s']['priority'])} | "
            f"{r['chat_p95_over_idle']:.2f} | {r['batch_throughput_ratio']:.3f} | "
            f"{r['work_ratio']:.3f} | {r['chat_served']['fcfs']}, "
            f"{r['chat_served']['priority']} of {r['chat_requests']} | "
            f"{equal} | {r['priority_preemptions']} "
            f"({r['max_preemptions_per_batch_request_priority']}) | "
            f"{r.get('cut_steps_priority', 0)} | {ms(r['chat_ttft_p50_s']['priority'])} | "
            f"{ms(r['chat_alone_ttft_p95_s'])} | {r['chat_p95_over_alone_p95']:.2f} |")
    p = result["pooled"]
    lines.append(f"\nbatch work alone (no interactive request, priority 10), priority / fcfs: "
                 f"{result['batch_alone_work_ratio']:.3f}")
    lines.append(
        f"pooled over {len(result['rounds'])} rounds: interactive p95 {ms(p['chat_ttft_p95_s'])}"
        f" over idle p50 {ms(p['idle_ttft_p50_s'])} = {p['chat_p95_over_idle']:.2f} (<= 1.5; "
        f"the same arrivals alone: {p['chat_alone_p95_over_idle']:.2f}) of "
        f"{p['chat_requests']} requests; all work priority / FCFS {p['work_ratio']:.3f} "
        "(>= 0.9)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, help="seconds of each loaded run")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    w = Workload.quick() if args.quick else Workload()
    if args.duration:
        w.duration_s = args.duration
    result = run(w, args.repeats)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "priority_bench.json").write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
