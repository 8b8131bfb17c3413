"""Live fleet bench: 3 `headstart engine` replicas (one thread each) behind the gateway, the
chat workload, every balance policy, one run; a single engine on the same traces for the
prefix-cache hit ratio; a replica killed mid-run (`bench/fleet/live_kill.py`).

    flock /tmp/headstart-bench.lock python -m bench.fleet.live --out bench-report/fleet

For each policy the replicas start fresh (empty caches), each app's system prompt is read
once (`bench/harness/priming.py`), then the chat trace runs at each of `--rates` (one seed per rate:
every policy gets the very same trace at a rate), and for `--sweep-policies` the rate is
swept (`bench/harness/sweep.py`, other users on the same apps) for the highest rate whose p95 TTFT
is within the SLO. The gateway
is `headstart serve` in its own process; every process shares the machine's cores with the
load generator (and, on a shared machine, with whatever else runs).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from bench.fleet.live_kill import kill_run
from bench.fleet.replicas import (
    MODEL,
    LiveSettings,
    gateway_config,
    start_gateway,
    start_replicas,
    stop_replicas,
)
from bench.harness.loadgen import LoadConfig, rate_runner
from bench.harness.priming import prime
from bench.harness.stats import RunSummary
from bench.harness.sweep import sweep_rates
from bench.harness.workloads import WorkloadSizes

POLICIES = ("round_robin", "random", "least_loaded", "session", "prefix")
BASELINE = "round_robin"


def hit_ratio(run: RunSummary) -> float:
    return run.cached_tokens / run.prompt_tokens if run.prompt_tokens else 0.0


async def policy_runs(settings: LiveSettings, policy: str, replicas: int, rates: list[float],
                      sweep: bool) -> dict:
    """Fresh replicas and gateway for `policy`: prime, run each rate, sweep if asked."""
    fleet = start_replicas(replicas, list(settings.engine_args))
    gateway = None
    try:
        gateway = start_gateway(gateway_config(fleet, policy))
        base = LoadConfig(base_url=gateway.base_url, model=MODEL, workload="chat",
                          duration_s=settings.duration_s, warmup_s=settings.warmup_s,
                          seed=settings.seed, sizes=settings.sizes,
                          drain_timeout_s=settings.drain_s, progress=False)
        await prime(base)
        target = f"{policy}x{replicas}"
        run_at = rate_runner(base, target=target, slo_ms=settings.slo_ms)
        runs = [await run_at(rate) for rate in rates]
        max_rate = None
        if sweep:  # other users than the fixed-rate runs: a trace replayed would find its
            # conversations already cached (same apps: the pool seed stays)
            sweep_at = rate_runner(dataclasses.replace(base, seed=settings.seed + 1,
                                                       pool_seed=settings.seed),
                                   target=target, slo_ms=settings.slo_ms)
            swept = await sweep_rates(sweep_at, start_rate=settings.start_rate,
                                      slo_ms=settings.slo_ms, max_rate=settings.max_rate,
                                      min_rate=settings.min_rate, refine=settings.refine,
                                      target=target, workload="chat")
            runs += swept.runs
            max_rate = swept.max_rate
        return {"policy": policy, "replicas": replicas, "max_rate": max_rate, "swept": sweep,
                "runs": [r.to_dict() for r in runs[:len(rates)]],
                "sweep_runs": [r.to_dict() for r in runs[len(rates):]]}
    finally:
        if gateway is not None:
            gateway.stop()
        stop_replicas(fleet)


def _run_at(result: dict | None, rate: float) -> RunSummary | None:
    found = [RunSummary.from_dict(r) for r in (result or {}).get("runs", []) if r["rate"] == rate]
    return found[0] if found else None


def compare(results: list[dict], single: dict | None, rates: list[float],
            min_rate: float) -> dict:
    """The issue's goals for the live fleet, judged from the runs."""
    by_policy = {r["policy"]: r for r in results}
    rr, prefix = by_policy.get(BASELINE), by_policy.get("prefix")
    table = []
    for rate in rates:
        row: dict = {"rate": rate}
        for name, result in [*by_policy.items(), ("single", single)]:
            run = _run_at(result, rate)
            if run is not None:
                row[name] = {"p95_ms": run.p95_ttft_ms(), "p50_ms": run.ttft_ms["p50"],
                             "hit": round(hit_ratio(run), 4), "errors": run.errors,
                             "requests": run.requests}
        table.append(row)
    out: dict = {"table": table,
                 "max_rate": {p: r["max_rate"] for p, r in by_policy.items() if r["swept"]}}
    ratios = [row["prefix"]["p95_ms"] / row[BASELINE]["p95_ms"] for row in table
              if "prefix" in row and BASELINE in row and row[BASELINE]["p95_ms"] > 0]
    hits = [row["prefix"]["hit"] / row["single"]["hit"] for row in table
            if "prefix" in row and "single" in row and row["single"]["hit"] > 0]
    rr_max = (rr or {}).get("max_rate")
    prefix_max = (prefix or {}).get("max_rate")
    out["p95_ratio_by_rate"] = [round(r, 3) for r in ratios]
    out["hit_vs_single_by_rate"] = [round(h, 3) for h in hits]
    # a baseline that meets the SLO at no rate down to `min_rate`: any passing rate beats it
    out["max_rate_ratio"] = (prefix_max / rr_max if prefix_max and rr_max
                             else None if not prefix_max else f"> {prefix_max / min_rate:g}")
    out["goals"] = {
        "prefix p95 TTFT <= 0.5x round robin's at the same rate":
            bool(ratios) and max(ratios) <= 0.5,
        "prefix highest rate within the SLO >= 1.5x round robin's":
            bool(prefix_max) and (not rr_max or prefix_max >= 1.5 * rr_max),
        "prefix hit ratio >= 0.9x a single engine's": bool(hits) and min(hits) >= 0.9,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet.live",
                                description=__doc__.split("\n")[0])
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--rates", default="0.5,1,2", help="every policy runs each of these")
    p.add_argument("--sweep-policies", default="round_robin,prefix")
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--start-rate", type=float, default=1.0)
    p.add_argument("--max-rate", type=float, default=16.0)
    p.add_argument("--min-rate", type=float, default=0.25)
    p.add_argument("--refine", type=int, default=2)
    p.add_argument("--size", action="append", default=[], metavar="KEY=VALUE",
                   help="chat workload sizes (bench/harness/workloads.py WorkloadSizes)")
    p.add_argument("--no-single", action="store_true", help="skip the single-engine runs")
    p.add_argument("--no-kill", action="store_true", help="skip the kill-one-replica run")
    p.add_argument("--kill-rate", type=float, default=1.0,
                   help="the kill run's rate: busy enough that the survivors' load spills")
    p.add_argument("--out", default="bench-report/fleet")
    args = p.parse_args(argv)
    sizes = WorkloadSizes().update(dict(kv.split("=", 1) for kv in args.size))
    settings = LiveSettings(duration_s=args.duration, start_rate=args.start_rate,
                            max_rate=args.max_rate, min_rate=args.min_rate,
                            refine=args.refine, sizes=sizes)
    rates = [float(r) for r in args.rates.split(",") if r]
    sweeping = {x for x in args.sweep_policies.split(",") if x}
    started = time.time()
    results: list[dict] = []
    for policy in [x for x in args.policies.split(",") if x]:
        results.append(asyncio.run(policy_runs(settings, policy, settings.replicas, rates,
                                               policy in sweeping)))
        print(f"[fleet] {policy} done ({time.time() - started:.0f} s)", file=sys.stderr,
              flush=True)
    single = None if args.no_single else asyncio.run(
        policy_runs(settings, "prefix", 1, rates, False))
    kill = None if args.no_kill else asyncio.run(kill_run(settings, rate=args.kill_rate))
    report = {"settings": dataclasses.asdict(settings), "rates": rates, "policies": results,
              "single": single, "kill": kill,
              "compare": compare(results, single, rates, settings.min_rate),
              "wall_s": round(time.time() - started)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet_live.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["compare"], indent=1))
    if kill:
        print(json.dumps({k: v for k, v in kill.items() if k not in ("timeline", "sent")},
                         indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
