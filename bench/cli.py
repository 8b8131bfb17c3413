"""`headstart bench`: load any OpenAI-compatible endpoint and report TTFT against the SLO.

    headstart bench --base-url http://localhost:8000 --workload chat --rate 2 --duration 30
    headstart bench --base-url http://localhost:8000 --workload faq --sweep --out report/

`headstart bench` loads this from the checkout only when it runs (gateway/cli.py); product
code never imports `bench`, and it does not ship in the package.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path

from bench.harness.loadgen import LoadConfig, first_model, rate_runner
from bench.harness.priming import prime
from bench.harness.report import runs_table, sweeps_table, write_report
from bench.harness.stats import RunSummary
from bench.harness.sweep import SweepResult, sweep_rates
from bench.harness.workloads import WORKLOADS, WorkloadSizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headstart bench", description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True, help="server root or its /v1 URL")
    p.add_argument("--model", help="model name to send (default: the first /v1/models entry)")
    p.add_argument("--workload", choices=WORKLOADS, default="chat")
    p.add_argument("--rate", type=float, default=1.0, help="requests per second (sweep start)")
    p.add_argument("--duration", type=float, default=30.0, help="measured seconds per run")
    p.add_argument("--warmup-s", type=float, default=5.0, help="seconds sent but not measured")
    p.add_argument("--sweep", action="store_true", help="find the highest rate within the SLO")
    p.add_argument("--max-rate", type=float, default=64.0, help="sweep ceiling")
    p.add_argument("--min-rate", type=float, default=0.05, help="sweep floor")
    p.add_argument("--sweep-factor", type=float, default=2.0, help="rate multiplier per step")
    p.add_argument("--refine", type=int, default=1, help="bisection steps after the sweep")
    p.add_argument("--min-requests", type=int, default=20,
                   help="sweeps: lengthen a run's window to measure about this many requests")
    p.add_argument("--drain-s", type=float, default=60.0,
                   help="how long to wait for answers after the window")
    p.add_argument("--slo-ms", type=float, default=700.0, help="p95 TTFT target")
    p.add_argument("--out", default="bench-report", help="report folder")
    p.add_argument("--concurrency", type=int, help="cap on requests in flight (time waiting for a slot is not in TTFT)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--name", help="target label in the report (default: the base URL)")
    p.add_argument("--max-tokens", type=int,
                   help="tokens per answer (default: chat 32, rag 32, faq 128, unique 32)")
    p.add_argument("--size", action="append", default=[], metavar="KEY=VALUE",
                   help="workload size, e.g. system_tokens=600 turns=3 docs=12 "
                        f"(fields: {', '.join(f.name for f in dataclasses.fields(WorkloadSizes))})")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--no-prime", action="store_true",
                   help="start cold: skip reading each shared prompt prefix once first")
    return p


def parse_sizes(pairs: list[str], max_tokens: int | None) -> WorkloadSizes:
    sizes = WorkloadSizes()
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--size wants KEY=VALUE, got {pair!r}")
        values[key.strip()] = value.strip()
    if max_tokens is not None:
        values["max_tokens"] = str(max_tokens)
    return sizes.update(values)


async def run_bench(args: argparse.Namespace) -> tuple[list[RunSummary], list[SweepResult]]:
    model = args.model or await first_model(args.base_url, args.api_key)
    target = args.name or args.base_url
    base = LoadConfig(base_url=args.base_url, model=model, workload=args.workload,
                      rate=args.rate, duration_s=args.duration, warmup_s=args.warmup_s,
                      seed=args.seed, concurrency=args.concurrency, api_key=args.api_key,
                      drain_timeout_s=args.drain_s,
                      sizes=parse_sizes(args.size, args.max_tokens),
                      progress=not args.no_progress)

    if not args.no_prime:
        await prime(base)
    run_at = rate_runner(base, target=target, slo_ms=args.slo_ms,
                         min_requests=args.min_requests if args.sweep else 0)
    if not args.sweep:
        return [await run_at(args.rate)], []
    result = await sweep_rates(run_at, start_rate=args.rate, slo_ms=args.slo_ms,
                               factor=args.sweep_factor, max_rate=args.max_rate,
                               min_rate=args.min_rate,
                               refine=args.refine, target=target, workload=args.workload)
    return result.runs, [result]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--soak" in argv:  # the soak mode has options of its own (bench/experiments/soak.py)
        from bench.experiments import soak  # it starts servers: tests/support/processes.py

        return soak.main([a for a in argv if a != "--soak"])
    args = build_parser().parse_args(argv)
    try:
        runs, sweeps = asyncio.run(run_bench(args))
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"headstart bench: {exc}", file=sys.stderr)
        return 2
    meta = {k: v for k, v in vars(args).items() if k != "api_key"}
    paths = write_report(Path(args.out), runs, slo_ms=args.slo_ms, sweeps=sweeps, meta=meta)
    if sweeps:
        print(sweeps_table(sweeps) + "\n")
    print(runs_table(runs))
    print(f"\nreport: {paths['markdown']}  page: {paths['html']}  json: {paths['json']}  "
          f"plots: {Path(args.out)}/*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
