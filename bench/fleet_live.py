"""Live fleet bench: 3 `headstart engine` replicas (one thread each) behind the gateway, the
chat workload, every balance policy, one run; a single engine on the same trace for the
prefix-cache hit ratio; a replica killed mid-run (`bench/fleet_live_kill.py`).

    flock /tmp/headstart-bench.lock python -m bench.fleet_live --out bench-report/fleet

For each policy the replicas start fresh (empty caches), each app's system prompt is read
once (`bench/priming.py`), then the rate is swept (`bench/sweep.py`) for the highest rate
whose p95 TTFT is within the SLO. Every policy is also run at round robin's highest rate, so
p95 TTFT compares at one rate. Runs at one rate share one seed: the same trace for each
policy. The gateway is `headstart serve` in its own process; every process shares the
machine's cores with the load generator (and, on a shared machine, with whatever else runs).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from bench.fleet_live_kill import kill_run
from bench.fleet_replicas import (
    MODEL,
    LiveSettings,
    gateway_config,
    start_gateway,
    start_replicas,
    stop_replicas,
)
from bench.loadgen import LoadConfig, rate_runner
from bench.priming import prime
from bench.stats import RunSummary
from bench.sweep import sweep_rates
from bench.workloads import WorkloadSizes

POLICIES = ("round_robin", "random", "least_loaded", "session", "prefix")
BASELINE = "round_robin"


def hit_ratio(run: RunSummary) -> float:
    return run.cached_tokens / run.prompt_tokens if run.prompt_tokens else 0.0


async def policy_runs(settings: LiveSettings, policy: str, replicas: int,
                      extra_rates: list[float]) -> dict:
    """Fresh replicas and gateway for `policy`: prime, sweep, then each of `extra_rates`."""
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
        sweep = await sweep_rates(run_at, start_rate=settings.start_rate, slo_ms=settings.slo_ms,
                                  max_rate=settings.max_rate, refine=settings.refine,
                                  target=target, workload="chat")
        for rate in extra_rates:
            if sweep.run_at(rate) is None:
                sweep.runs.append(await run_at(rate))
        return {"policy": policy, "replicas": replicas, "max_rate": sweep.max_rate,
                "runs": [r.to_dict() for r in sweep.runs]}
    finally:
        if gateway is not None:
            gateway.stop()
        stop_replicas(fleet)


def compare(results: list[dict], single: dict | None, slo_ms: float) -> dict:
    """The issue's goals for the live fleet, from the runs."""
    by_policy = {r["policy"]: r for r in results if r["replicas"] > 1}
    rr, prefix = by_policy.get(BASELINE), by_policy.get("prefix")
    out: dict = {}
    if rr is None or prefix is None or rr["max_rate"] is None:
        return out
    at = rr["max_rate"]

    def run_at(result: dict, rate: float) -> RunSummary | None:
        found = [RunSummary.from_dict(r) for r in result["runs"] if r["rate"] == rate]
        return found[0] if found else None

    rr_run, prefix_run = run_at(rr, at), run_at(prefix, at)
    if rr_run and prefix_run:
        out["rate"] = at
        out["p95_ratio"] = prefix_run.p95_ttft_ms() / rr_run.p95_ttft_ms()
        out["p95_ms"] = {p: run_at(r, at).p95_ttft_ms() if run_at(r, at) else None
                         for p, r in by_policy.items()}
        out["hit_ratio"] = {p: hit_ratio(run_at(r, at)) if run_at(r, at) else None
                            for p, r in by_policy.items()}
    out["max_rate"] = {p: r["max_rate"] for p, r in by_policy.items()}
    if prefix["max_rate"] is not None:
        out["max_rate_ratio"] = prefix["max_rate"] / at
    if single is not None and prefix_run is not None:
        single_run = run_at(single, at)
        if single_run is not None:
            out["single_hit_ratio"] = hit_ratio(single_run)
            out["hit_ratio_vs_single"] = hit_ratio(prefix_run) / max(1e-9, hit_ratio(single_run))
    out["goals"] = {
        "p95 at round robin's highest rate <= 0.5x": out.get("p95_ratio", 9) <= 0.5,
        "highest rate within SLO >= 1.5x": out.get("max_rate_ratio", 0) >= 1.5,
        "prefix hit ratio >= 0.9x a single engine's": out.get("hit_ratio_vs_single", 0) >= 0.9,
    }
    return out


async def single_engine(settings: LiveSettings, rate: float) -> dict:
    """One replica on the trace of `rate` (as many requests; it may fall behind), for its
    prefix-cache hit ratio."""
    s = dataclasses.replace(settings, start_rate=rate, max_rate=rate, refine=0)
    result = await policy_runs(s, "prefix", 1, [])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_live", description=__doc__.split("\n")[0])
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--start-rate", type=float, default=1.0)
    p.add_argument("--max-rate", type=float, default=16.0)
    p.add_argument("--refine", type=int, default=2)
    p.add_argument("--size", action="append", default=[], metavar="KEY=VALUE",
                   help="chat workload sizes (bench/workloads.py WorkloadSizes)")
    p.add_argument("--no-kill", action="store_true", help="skip the kill-one-replica run")
    p.add_argument("--out", default="bench-report/fleet")
    args = p.parse_args(argv)
    sizes = WorkloadSizes().update(dict(kv.split("=", 1) for kv in args.size))
    settings = LiveSettings(duration_s=args.duration, start_rate=args.start_rate,
                            max_rate=args.max_rate, refine=args.refine, sizes=sizes)
    policies = [x for x in args.policies.split(",") if x]
    policies.sort(key=lambda x: x != BASELINE)  # the baseline first: its rate is the yardstick
    started = time.time()
    results: list[dict] = []
    for policy in policies:
        extra = [results[0]["max_rate"]] if results and results[0]["max_rate"] else []
        results.append(asyncio.run(policy_runs(settings, policy, settings.replicas, extra)))
        print(f"[fleet] {policy}: highest rate within SLO {results[-1]['max_rate']}",
              file=sys.stderr, flush=True)
    single = None
    if results and results[0]["max_rate"]:
        single = asyncio.run(single_engine(settings, results[0]["max_rate"]))
    kill = None
    if not args.no_kill and results and results[0]["max_rate"]:
        kill = asyncio.run(kill_run(settings, rate=0.6 * results[0]["max_rate"]))
    report = {"settings": dataclasses.asdict(settings), "policies": results, "single": single,
              "kill": kill, "goals": compare(results, single, settings.slo_ms),
              "wall_s": round(time.time() - started)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet_live.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["goals"], indent=1))
    if kill:
        print(json.dumps({k: v for k, v in kill.items() if k != "timeline"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
