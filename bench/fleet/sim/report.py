"""The fleet simulator's scenarios and their report (Markdown + JSON).

    python -m bench.fleet.sim.report --scenario scale|hot|gateways|all [--out DIR]
    python -m bench.fleet.sim.report --scenario calibrate --live DIR/fleet_live.json

- `scale`: 4, 16, 64 and 256 replicas, every policy, chat / rag / groups traces with as
  many apps (groups; twice as many documents) as replicas, at one per-replica rate; then
  the highest chat rate within the SLO for round robin, prefix and prefix+kv.
- `hot`: one prefix takes half the traffic; how far the busiest replica is from the mean.
- `gateways`: one gateway against two, with and without KV events.
- `calibrate`: the live fleet bench's own trace and rates (`bench/fleet/live.py`'s JSON) on
  three simulated replicas, side by side with what the live run measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from bench.fleet.sim.calibration import calibrate, fit
from bench.fleet.sim.replica import StepCosts
from bench.fleet.sim.simulator import SIM_POLICIES, SimConfig, SimResult, simulate
from bench.fleet.sim.workloads import TraceSizes

SIZES = (4, 16, 64, 256)
# requests per second per replica: about a quarter of what prefix routing keeps within the
# SLO with this machine's step costs (7.7/s per replica at 4 replicas; round robin 5.2/s),
# so that load is moderate (a cold 1,500-token document still costs a replica a second)
PER_REPLICA_RATE = {"chat": 2.0, "rag": 0.2, "groups": 2.0, "hot": 2.0}
DURATION_FACTOR = {"rag": 10.0}  # rare requests: a longer window for as many of them


def traces(workload: str, replicas: int) -> TraceSizes:
    """A trace whose shared prefixes grow with the fleet: one app, two documents or one
    group per replica (a fleet is as large as the traffic it serves)."""
    groups = {"chat": replicas, "rag": 2 * replicas, "groups": replicas}.get(workload, replicas)
    return TraceSizes(groups=max(4, groups))


def base_config(workload: str, replicas: int, duration_s: float, **kw) -> SimConfig:
    """A scenario's run: the workload's per-replica rate and window, prefixes per fleet size."""
    duration = duration_s * DURATION_FACTOR.get(workload, 1.0)
    sizes = traces("groups" if workload == "hot" else workload, replicas)
    return SimConfig(replicas=replicas, workload=workload, sizes=sizes,
                     rate=PER_REPLICA_RATE[workload] * replicas, duration_s=duration,
                     warmup_s=min(10.0, duration / 3), **kw)


def run(config: SimConfig, rows: list[dict]) -> SimResult:
    result = simulate(config)
    rows.append(result.row())
    r = result.row()
    print(f"[sim] {r['replicas']:>3} x {r['policy']:<12} gw={r['gateways']} {r['workload']:<6} "
          f"@{r['rate']:>7.1f}/s p95 {r['ttft_p95_ms']:>8} ms hit {r['hit_ratio']:.3f} "
          f"max/mean busy {r['busy_max_over_mean']:.2f} served "
          f"{r['served_max_over_mean']:.2f} held {r['held_max_over_mean']:.2f} "
          f"utilization {r['utilization']:.2f}",
          file=sys.stderr, flush=True)
    return result


def highest_rate(base: SimConfig, slo_ms: float, rows: list[dict], refine: int = 4) -> float:
    """The highest rate whose p95 TTFT stays within `slo_ms`: doubling, then bisection."""
    lo, hi, rate = 0.0, math.inf, base.rate
    while hi == math.inf and rate < base.rate * 64:
        if run(dataclasses.replace(base, rate=rate), rows).p95() <= slo_ms:
            lo, rate = rate, rate * 2
        else:
            hi = rate
    if lo == 0.0:
        rate = base.rate / 2
        while lo == 0.0 and rate > base.rate / 64:
            if run(dataclasses.replace(base, rate=rate), rows).p95() <= slo_ms:
                lo = rate
            else:
                hi, rate = rate, rate / 2
    for _ in range(refine if 0.0 < lo and hi != math.inf else 0):
        mid = math.sqrt(lo * hi)
        if run(dataclasses.replace(base, rate=mid), rows).p95() <= slo_ms:
            lo = mid
        else:
            hi = mid
    return round(lo, 2)


def scale(out: dict, duration_s: float, slo_ms: float) -> None:
    rows: list[dict] = []
    maxima: list[dict] = []
    for workload in ("chat", "rag", "groups"):
        for n in SIZES:
            for policy in SIM_POLICIES:
                run(base_config(workload, n, duration_s, policy=policy), rows)
    for n in SIZES:
        for policy in ("round_robin", "prefix", "prefix+kv"):
            best = highest_rate(base_config("chat", n, duration_s, policy=policy), slo_ms, [])
            maxima.append({"replicas": n, "policy": policy, "max_rate_within_slo": best})
            print(f"[sim] {n} x {policy}: highest rate within {slo_ms:g} ms: {best}/s",
                  file=sys.stderr, flush=True)
    out["scale"] = {"rows": rows, "max_rates": maxima}


def hot(out: dict, duration_s: float) -> None:
    """One prefix takes half (or 90%) of the traffic; at the usual rate, and at twice it,
    where the replicas are busy enough for load to matter (round robin is then far past
    the SLO)."""
    rows: list[dict] = []
    for n in (64, 256):
        for per_replica in (PER_REPLICA_RATE["hot"], 2 * PER_REPLICA_RATE["hot"]):
            for share in (0.5, 0.9):
                for policy in ("round_robin", "prefix", "prefix+kv"):
                    config = base_config("hot", n, duration_s, policy=policy)
                    config.sizes.hot_share = share
                    config.rate = per_replica * n
                    run(config, rows)
                    rows[-1]["hot_share"] = share
    out["hot"] = rows


def gateways(out: dict, duration_s: float) -> None:
    rows: list[dict] = []
    for n in (64, 256):
        for workload in ("chat", "groups"):
            for policy, m in (("prefix+kv", 1), ("prefix+kv", 2), ("prefix", 2),
                              ("prefix+kv", 4), ("prefix", 4)):
                run(base_config(workload, n, duration_s, policy=policy, gateways=m), rows)
    out["gateways"] = rows


def markdown(out: dict) -> str:
    """The scenarios' rows as Markdown tables: p95 TTFT (ms) / prefix-cache hit ratio."""
    parts = []
    rows = out.get("scale", {}).get("rows", [])
    if rows:
        policies = list(dict.fromkeys(r["policy"] for r in rows))
        parts.append("| trace | replicas | " + " | ".join(policies) + " |")
        parts.append("|---|---|" + "---|" * len(policies))
        for (workload, n) in dict.fromkeys((r["workload"], r["replicas"]) for r in rows):
            cells = {r["policy"]: f"{r['ttft_p95_ms']:g} / {r['hit_ratio']:.2f}" for r in rows
                     if (r["workload"], r["replicas"]) == (workload, n)}
            parts.append(f"| {workload} | {n} | " + " | ".join(cells.get(p, "") for p in policies)
                         + " |")
    for m in out.get("scale", {}).get("max_rates", []):
        parts.append(f"- {m['replicas']} replicas, {m['policy']}: highest chat rate within the "
                     f"SLO {m['max_rate_within_slo']}/s")
    for name in ("hot", "gateways"):
        if out.get(name):
            parts.append(f"\n| {name} | replicas | gateways | policy | rate | p95 ms | hit | "
                         "max/mean busy | served | held | utilization |")
            parts.append("|---|---|---|---|---|---|---|---|---|---|---|")
            for r in out[name]:
                parts.append(f"| {r['workload']} {r.get('hot_share', '')} | {r['replicas']} | "
                             f"{r['gateways']} | {r['policy']} | {r['rate']:g} | "
                             f"{r['ttft_p95_ms']:g} | {r['hit_ratio']:.3f} | "
                             f"{r['busy_max_over_mean']:.2f} | {r['served_max_over_mean']:.2f} | "
                             f"{r['held_max_over_mean']:.2f} | {r['utilization']:.2f} |")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Fleet simulator scenarios")
    p.add_argument("--scenario", default="all",
                   choices=["scale", "hot", "gateways", "calibrate", "all"])
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--slo-ms", type=float, default=700.0)
    p.add_argument("--live", help="calibrate: the live fleet bench's JSON")
    p.add_argument("--costs", help="calibrate: step costs measured by bench.fleet.sim.calibrate "
                                   "(its --out JSON; default: StepCosts' defaults)")
    p.add_argument("--cores", type=float, default=2.0,
                   help="calibrate: cores the live replicas shared")
    p.add_argument("--fit", action="store_true",
                   help="calibrate: fit the engine's speed during the runs and the cores the "
                        "replicas effectively had (bench/fleet/sim/calibration.py, fit)")
    p.add_argument("--overhead-ms", type=float, default=4.0,
                   help="calibrate: gateway + HTTP + client time added to each TTFT")
    p.add_argument("--out", default="fleet-sim", help="folder for fleet_sim.json")
    args = p.parse_args(argv)
    out: dict = {}
    if args.scenario in ("scale", "all"):
        scale(out, args.duration, args.slo_ms)
    if args.scenario in ("hot", "all"):
        hot(out, args.duration)
    if args.scenario in ("gateways", "all"):
        gateways(out, args.duration)
    if args.scenario == "calibrate":
        costs = StepCosts()
        if args.costs:
            measured = json.loads(Path(args.costs).read_text())
            costs = StepCosts(**{f.name: measured[f.name]
                                 for f in dataclasses.fields(StepCosts) if f.name in measured})
        live = json.loads(Path(args.live).read_text())
        if args.fit:
            factor, cores, out["calibrate"] = fit(live, costs, args.overhead_ms / 1000.0)
            out["fitted"] = {"cost_scale": factor, "cores": cores}
            print(f"[calibrate] fitted: step costs x{factor}, {cores} cores", file=sys.stderr)
        else:
            out["calibrate"] = calibrate(live, costs, args.overhead_ms / 1000.0, args.cores)
        for row in out["calibrate"]:
            print(f"[calibrate] {row['policy']:<12} x{row['replicas']} @{row['rate']:g}/s "
                  f"({row['requests']} requests) p50 live {row['live_p50_ms']} sim "
                  f"{row['sim_p50_ms']} ({row['p50_diff']}) p95 live {row['live_p95_ms']} sim "
                  f"{row['sim_p95_ms']} ({row['p95_diff']}) hit live {row['live_hit']} sim "
                  f"{row['sim_hit']} ({row['hit_diff']})", file=sys.stderr)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"fleet_sim_{args.scenario}.json").write_text(json.dumps(out, indent=1))
    (folder / f"fleet_sim_{args.scenario}.md").write_text(markdown(out))
    print(json.dumps(out, indent=1)[:4000])


if __name__ == "__main__":
    main()
