"""The fleet simulator against the live fleet bench: the same trace, rates and policies.

`calibrate(live)` takes `bench/fleet/live.py`'s JSON and replays each of its fixed-rate runs
in the simulator: the chat sessions the live load generator sent (same seeds and sizes,
tokenized with the real chat template), the same replicas, policy and rate, one run after
the other on the same simulated replicas as live (so each run starts from the caches the
runs before it left). It reports p95 and p50 TTFT and the prefix-cache hit ratio side by
side, and their relative differences (the target is within 20%).
"""

from __future__ import annotations

import dataclasses

from bench.fleet.sim.replica import StepCosts
from bench.fleet.sim.simulator import FleetSim, SimConfig
from bench.harness.workloads import WorkloadSizes

LIVE_TO_SIM = {"prefix": "prefix+kv"}  # the live gateway follows the replicas' KV events


def live_seed(base_seed: int, rate: float) -> int:
    """The seed `bench.harness.loadgen.rate_runner` gives the run at `rate`."""
    return base_seed * 100_003 + round(rate * 1000)


def live_duration(duration_s: float, rate: float, min_requests: int = 20) -> float:
    return max(duration_s, min(min_requests / rate, 60.0))


def calibrate(live: dict, costs: StepCosts | None = None, overhead_s: float = 0.004,
              cores: float | None = 2.0, replicas: int | None = None) -> list[dict]:
    """One row per fixed-rate live run (of fleets of `replicas`, default all), simulated in
    the live order on the same simulated replicas (fresh and primed per policy, then each
    rate after the one before)."""
    settings = live["settings"]
    sizes = WorkloadSizes(**settings["sizes"])
    rows = []
    results = list(live["policies"]) + ([live["single"]] if live.get("single") else [])
    for result in results:
        if replicas is not None and result["replicas"] != replicas:
            continue
        previous: FleetSim | None = None
        for run in result["runs"][:len(live.get("rates") or result["runs"])]:
            rate = float(run["rate"])
            config = SimConfig(
                replicas=result["replicas"], policy=LIVE_TO_SIM.get(result["policy"],
                                                                    result["policy"]),
                workload="chat_live", rate=rate, seed=live_seed(settings["seed"], rate),
                pool_seed=settings["seed"],
                duration_s=live_duration(settings["duration_s"], rate),
                warmup_s=settings["warmup_s"], drain_s=settings["drain_s"],
                capacity_blocks=_blocks(settings["engine_args"]), live_sizes=sizes,
                costs=costs or StepCosts(), overhead_s=overhead_s, cores=cores)
            previous = FleetSim(config, after=previous)
            sim = previous.run()
            live_p95 = _num(run["ttft_ms"]["p95"])
            live_hit = run["cached_tokens"] / run["prompt_tokens"] if run["prompt_tokens"] else 0
            rows.append({"policy": result["policy"], "replicas": result["replicas"],
                         "rate": rate, "requests": run["requests"], "live_p95_ms": live_p95,
                         "sim_p95_ms": sim.p95(), "p95_diff": _rel(sim.p95(), live_p95),
                         "live_hit": round(live_hit, 4), "sim_hit": round(sim.hit_ratio, 4),
                         "hit_diff": _rel(sim.hit_ratio, live_hit),
                         "live_p50_ms": _num(run["ttft_ms"]["p50"]),
                         "sim_p50_ms": sim.ttft_ms["p50"],
                         "p50_diff": _rel(sim.ttft_ms["p50"], _num(run["ttft_ms"]["p50"]))})
    return rows


def _blocks(engine_args: list[str]) -> int:
    args = list(engine_args)
    return int(args[args.index("--num-kv-blocks") + 1]) if "--num-kv-blocks" in args else 4096


def _num(value) -> float:
    return float("inf") if value in (None, "inf") else float(value)


def _rel(sim: float, live: float) -> float | None:
    if not live or live == float("inf") or sim == float("inf"):
        return None
    return round((sim - live) / live, 3)


def _median_abs(rows: list[dict], key: str) -> float:
    diffs = sorted(abs(r[key]) for r in rows if r[key] is not None)
    return diffs[len(diffs) // 2] if diffs else float("inf")


def fit(live: dict, costs: StepCosts, overhead_s: float = 0.004,
        scales: tuple[float, ...] = (0.4, 0.5, 0.6, 0.7, 0.85, 1.0, 1.2),
        cores: tuple[float, ...] = (0.75, 1.0, 1.25, 1.5, 2.0, 3.0),
        ) -> tuple[float, float, list[dict]]:
    """Two numbers the machine's other work leaves unknown, fitted one after the other:
    how much faster or slower the engine stepped during the live runs than when its costs
    were measured (`scale`, on the single replica's runs: median |p50 difference|), then
    how many cores the three one-thread replicas effectively had (on the fleet runs:
    median |p95 difference|). Returns (scale, cores, every row with both)."""
    def scaled(k: float) -> StepCosts:
        return StepCosts(*(k * getattr(costs, f.name) for f in dataclasses.fields(StepCosts)))

    best_scale = min(scales, key=lambda k: _median_abs(
        calibrate(live, scaled(k), overhead_s, None, replicas=1), "p50_diff"))
    best_cores = min(cores, key=lambda c: _median_abs(
        [r for r in calibrate(live, scaled(best_scale), overhead_s, c) if r["replicas"] > 1],
        "p95_diff"))
    return best_scale, best_cores, calibrate(live, scaled(best_scale), overhead_s, best_cores)
