"""The fleet simulator's scenarios and their report (Markdown + JSON).

    python -m bench.fleet.sim.report --scenario scale|hot|gateways|disagg|all [--out DIR]
    python -m bench.fleet.sim.report --scenario calibrate --live DIR/fleet_live.json

- `scale`: 4, 16, 64 and 256 replicas, every policy, chat / rag / groups traces with as
  many apps (groups; twice as many documents) as replicas, at one per-replica rate; then
  the highest chat rate within the SLO for round robin, prefix and prefix+kv.
- `hot`: one prefix takes half the traffic; how far the busiest replica is from the mean.
- `gateways`: one gateway against two, with and without KV events.
- `disagg`: colocated replicas against prefill and decode pools of the same size (8-256
  replicas), on p95 TTFT and p95 inter-token gap, with the handover cost measured by
  `bench/engine/disagg_bench.py`.
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


DISAGG_SIZES = (8, 32, 128, 256)
DISAGG_SHARES = (0.0, 0.25, 0.5, 0.75)  # of the replicas in the prefill pool; 0: colocated
# trace name -> (workload, documents or apps per replica): `rag-cold` has 64 documents per
# replica, so most prompts are read cold (1,000-2,000 tokens each)
DISAGG_TRACES = {"chat": ("chat", None), "rag": ("rag", None), "rag-cold": ("rag", 64)}
# a handed block's cost, measured by `python -m bench.engine.disagg_bench --pin` on this
# machine (2026-12-02 07:31-07:37; loopback TCP, one torch thread per engine): fetch and
# load 0.46 ms a block (368,640 bytes), of which loading it into the pool on the step
# thread 0.07-0.11 ms (engine/kv_handover.py's import_blocks, 124 blocks in 9-14 ms)
HANDOVER_BLOCK_S = 0.00046
IMPORT_BLOCK_S = 0.0001


def disagg(out: dict, duration_s: float, slo_ms: float, itl_slo_ms: float,
           handover_block_s: float = HANDOVER_BLOCK_S,
           import_block_s: float = IMPORT_BLOCK_S) -> None:
    """Colocated replicas against the same number split into prefill and decode pools
    (a quarter, half or three quarters of them prefill), 8 to 256 replicas, the chat, rag
    and rag-cold traces with 128-token answers, at the usual per-replica rate and twice
    it; each run against the TTFT and inter-token SLOs (p95), and a verdict per trace,
    fleet and load."""
    rows: list[dict] = []
    for trace_name, (workload, per_replica) in DISAGG_TRACES.items():
        for n in DISAGG_SIZES:
            for load in (1.0, 2.0):
                for share in DISAGG_SHARES:
                    config = base_config(workload, n, duration_s, policy="prefix+kv",
                                         prefill_replicas=round(n * share),
                                         handover_block_s=handover_block_s,
                                         import_block_s=import_block_s)
                    config.duration_s = duration_s  # rag's longer window: too slow at 256
                    config.rate *= load
                    config.sizes.answer_tokens = 128
                    if per_replica:
                        config.sizes.groups = per_replica * n
                    result = run(config, rows)
                    rows[-1].update(
                        trace=trace_name, load=load, prefill_share=share,
                        ttft_ok=result.p95() <= slo_ms,
                        itl_ok=result.itl_ms.get("p95", math.inf) <= itl_slo_ms)
    out["disagg"] = {"slo_ms": slo_ms, "itl_slo_ms": itl_slo_ms,
                     "handover_block_s": handover_block_s, "import_block_s": import_block_s,
                     "rows": rows, "verdicts": disagg_verdicts(rows)}


def disagg_verdicts(rows: list[dict]) -> list[dict]:
    """Per trace, fleet size and load: which layout meets both SLOs (p95 TTFT and p95
    inter-token gap), and by how much the best split differs from colocated."""
    verdicts = []
    for key in dict.fromkeys((r["trace"], r["replicas"], r["load"]) for r in rows):
        group = [r for r in rows if (r["trace"], r["replicas"], r["load"]) == key]
        colocated = next(r for r in group if r["prefill_share"] == 0.0)
        splits = [r for r in group if r["prefill_share"] > 0.0]
        passing = [r for r in splits if r["ttft_ok"] and r["itl_ok"]]
        best = min(passing or splits, key=lambda r: (r["ttft_p95_ms"], r["itl_p95_ms"]))
        co_ok = colocated["ttft_ok"] and colocated["itl_ok"]
        if passing and not co_ok:
            winner = "disaggregated"
        elif co_ok and not passing:
            winner = "colocated"
        elif co_ok:
            winner = "both meet the SLOs"
        else:
            winner = "neither meets the SLOs"
        verdicts.append({"trace": key[0], "replicas": key[1], "load": key[2],
                         "winner": winner, "best_prefill_share": best["prefill_share"],
                         "lower_ttft": _lowest(group, "ttft_p95_ms"),
                         "lower_itl": _lowest(group, "itl_p95_ms"),
                         "ttft_p95_ms": (colocated["ttft_p95_ms"], best["ttft_p95_ms"]),
                         "itl_p95_ms": (colocated["itl_p95_ms"], best["itl_p95_ms"])})
    return verdicts


def _lowest(group: list[dict], key: str) -> str:
    """The layout with the lowest `key`: colocated, or the prefill share of a split."""
    best = min(group, key=lambda r: (r[key], r["prefill_share"]))
    return "colocated" if best["prefill_share"] == 0.0 else f"{best['prefill_share']:.0%} prefill"


def disagg_markdown(d: dict) -> list[str]:
    parts = ["\n| trace | replicas | load | " + " | ".join(
        "colocated" if s == 0 else f"{s:.0%} prefill" for s in DISAGG_SHARES)
        + f" | meets TTFT p95 <= {d['slo_ms']:g} ms and inter-token p95 <= "
        f"{d['itl_slo_ms']:g} ms | lowest p95 TTFT | lowest p95 inter-token |",
        "|---|---|---|" + "---|" * (len(DISAGG_SHARES) + 3)]
    verdicts = {(v["trace"], v["replicas"], v["load"]): v for v in d["verdicts"]}
    for key, v in verdicts.items():
        cells = {r["prefill_share"]: f"{r['ttft_p95_ms']:g} / {r['itl_p95_ms']:g}"
                 for r in d["rows"] if (r["trace"], r["replicas"], r["load"]) == key}
        winner = v["winner"]
        if winner == "disaggregated":
            winner += f" ({v['best_prefill_share']:.0%} prefill)"
        parts.append(f"| {key[0]} | {key[1]} | {key[2]:g}x | "
                     + " | ".join(cells.get(s, "") for s in DISAGG_SHARES)
                     + f" | {winner} | {v['lower_ttft']} | {v['lower_itl']} |")
    return parts


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
    if out.get("disagg"):
        parts += disagg_markdown(out["disagg"])
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Fleet simulator scenarios")
    p.add_argument("--scenario", default="all",
                   choices=["scale", "hot", "gateways", "disagg", "calibrate", "all"])
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--slo-ms", type=float, default=700.0)
    p.add_argument("--itl-slo-ms", type=float, default=50.0,
                   help="disagg: the inter-token SLO (p95 gap between answer tokens)")
    p.add_argument("--handover-block-ms", type=float, default=HANDOVER_BLOCK_S * 1000,
                   help="disagg: ms to hand a decode replica one KV block (bench/engine/"
                        "disagg_bench.py measures it)")
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
    if args.scenario in ("disagg", "all"):
        disagg(out, args.duration, args.slo_ms, args.itl_slo_ms,
               args.handover_block_ms / 1000)
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
