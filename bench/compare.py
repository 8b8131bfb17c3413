"""`make bench` / `python -m bench.compare`: every target, every workload, one report.

Starts each target's servers on free ports (see `bench/harness/targets.py`), sweeps each workload's
request rate against it, stops it, and writes the report with the goals judged against
llama.cpp's `llama-server`. The baseline runs first, so every other target is also measured at
exactly the baseline's highest rate within the SLO (the p95 comparison point).

    python -m bench.compare --workloads chat,rag,faq --duration 20 --out bench-report/compare
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from bench.harness.goals import comparison_rates, evaluate_goals, goals_table
from bench.harness.loadgen import LoadConfig, rate_runner
from bench.harness.priming import prime
from bench.harness.report import sweeps_table, write_report
from bench.harness.stats import RunSummary
from bench.harness.sweep import SweepResult, sweep_rates
from bench.harness.targets import TARGETS, RunningTarget, start_target, unavailable_reason
from bench.harness.workloads import WORKLOADS, WorkloadSizes

BASELINE = "llama-server"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated")
    p.add_argument("--workloads", default="chat,rag,faq", help=f"from {', '.join(WORKLOADS)}")
    p.add_argument("--start-rate", type=float, default=0.25)
    p.add_argument("--max-rate", type=float, default=16.0)
    p.add_argument("--min-rate", type=float, default=0.1, help="where a failing sweep stops")
    p.add_argument("--refine", type=int, default=1)
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--drain-s", type=float, default=20.0, help="wait for stragglers per run")
    p.add_argument("--max-tokens", type=int, default=0, help="0: per-workload default")
    p.add_argument("--min-requests", type=int, default=20,
                   help="lengthen a run's window to measure about this many requests")
    p.add_argument("--slo-ms", type=float, default=700.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="llama-server threads")
    p.add_argument("--out", default="bench-report/compare")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-prime", action="store_true",
                   help="start each sweep cold (default: each shared prefix read once first)")
    p.add_argument("--reuse", action="append", default=[], metavar="REPORT_JSON",
                   help="add the sweeps of targets not run now from an earlier report.json")
    return p


async def sweep_target(target: RunningTarget, args: argparse.Namespace, workloads: list[str],
                       extra_rates: dict[str, float]) -> list[SweepResult]:
    """Sweep every workload on a running target, plus the baseline's comparison rate."""
    results = []
    for workload in workloads:
        base = LoadConfig(base_url=target.base_url, model=target.model, workload=workload,
                          duration_s=args.duration, warmup_s=args.warmup_s, seed=args.seed,
                          api_key=target.api_key,
                          sizes=WorkloadSizes(max_tokens=args.max_tokens),
                          drain_timeout_s=args.drain_s, progress=not args.no_progress)
        if not args.no_prime:
            await prime(base)
        run_at = rate_runner(base, target=target.name, slo_ms=args.slo_ms,
                             min_requests=args.min_requests)
        sweep = await sweep_rates(run_at, start_rate=args.start_rate, slo_ms=args.slo_ms,
                                  max_rate=args.max_rate, min_rate=args.min_rate,
                                  refine=args.refine,
                                  target=target.name, workload=workload)
        rate = extra_rates.get(workload)
        if rate is not None and sweep.run_at(rate) is None:
            sweep.runs.append(await run_at(rate))
        results.append(sweep)
    return results


def load_sweeps(path: str, skip_targets: set[str]) -> list[SweepResult]:
    """The sweeps of an earlier `report.json`, except those of `skip_targets`."""
    doc = json.loads(Path(path).read_text())
    runs = [RunSummary.from_dict(r) for r in doc["runs"]]
    return [SweepResult(s["target"], s["workload"], s["slo_ms"],
                        [r for r in runs if (r.target, r.workload) == (s["target"], s["workload"])])
            for s in doc["sweeps"] if s["target"] not in skip_targets]


def ordered_targets(names: list[str]) -> list[str]:
    """The baseline first, so the others can be measured at its comparison rates."""
    return sorted(names, key=lambda n: n != BASELINE)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    names = ordered_targets([t for t in args.targets.split(",") if t])
    sweeps: list[SweepResult] = [s for path in args.reuse for s in load_sweeps(path, set(names))]
    skipped: dict[str, str] = {}
    notes: dict[str, str] = {}
    started = time.time()
    for name in names:
        reason = unavailable_reason(name)
        if reason:
            skipped[name] = reason
            print(f"[bench] skipping {name}: {reason}", file=sys.stderr)
            continue
        print(f"[bench] starting {name}", file=sys.stderr, flush=True)
        try:
            target = start_target(name, threads=args.threads)
        except RuntimeError as exc:
            skipped[name] = f"failed to start: {str(exc)[-600:]}"
            print(f"[bench] {name} failed to start: {exc}", file=sys.stderr)
            continue
        notes[name] = target.notes
        try:
            extra = comparison_rates(sweeps, BASELINE)
            sweeps += asyncio.run(sweep_target(target, args, workloads, extra))
        finally:
            target.stop()
    goals = evaluate_goals(sweeps, BASELINE)
    meta = {**vars(args), "targets_run": notes, "skipped_targets": skipped,
            "wall_s": round(time.time() - started)}
    runs = [r for s in sweeps for r in s.runs]
    if not runs:
        print("[bench] no target ran", file=sys.stderr)
        return 1
    paths = write_report(Path(args.out), runs, slo_ms=args.slo_ms, sweeps=sweeps, meta=meta,
                         goals_markdown=goals_table(goals) if goals else
                         f"No goals: the baseline ({BASELINE}) did not run.",
                         goals=[g.to_dict() for g in goals])
    print(sweeps_table(sweeps) + "\n")
    if goals:
        print(goals_table(goals) + "\n")
    print(f"report: {paths['markdown']} and {paths['html']} (plots beside them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
