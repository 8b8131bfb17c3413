"""Admission control under overload, measured: the same gateway with and without
`limits.max_queue_s`, hit by a burst of concurrent requests and by twice the highest rate
it serves within the TTFT SLO.

    python -m bench.overload [--slo-rate 2.83] [--max-queue-s 0.5] [--burst 48]
                             [--burst-max-queue-s 1] [--duration 60] [--rounds 2] [--out DIR]

Both gateways run the bundled engine in their own process (`headstart serve`, caches and
transforms off, as `make bench`'s `headstart-off`), started once and measured in turn
(A, B, A, B...), so drifting load on the machine hits both alike. Reported per run: answered,
shed (429), 5xx, other errors, TTFT p50/p95 of the answered, the share of answered within
the SLO, and goodput (answered within the SLO per second). `--slo-rate` defaults to
`make bench`'s result for `headstart-off` on the chat workload (README, "Benchmarks").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from bench.loadgen import LoadConfig, run_load
from bench.processes import ServerProcess, free_port, headstart_cmd
from bench.stats import RequestRecord, percentile
from bench.targets import MODEL_NAME, _write_yaml, gateway_config


@dataclass
class Outcome:
    """One run against one gateway."""

    target: str
    kind: str  # burst | rate
    offered: int
    answered: int = 0
    shed: int = 0
    server_errors: int = 0
    other_errors: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    within_slo: float = 0.0  # share of the answered whose TTFT met the SLO
    goodput_rps: float = 0.0
    retry_after_s: list[int] = field(default_factory=list)

    def fill(self, ttfts_s: list[float], slo_ms: float, seconds: float) -> Outcome:
        self.answered = len(ttfts_s)
        ms = [t * 1000 for t in ttfts_s]
        p50, p95 = percentile(ms, 50), percentile(ms, 95)
        self.ttft_p50_ms = None if p50 is None else round(p50, 1)
        self.ttft_p95_ms = None if p95 is None else round(p95, 1)
        good = sum(1 for t in ms if t <= slo_ms)
        self.within_slo = round(good / len(ms), 3) if ms else 0.0
        self.goodput_rps = round(good / seconds, 3)
        return self


def start_gateway(max_queue_s: float | None) -> ServerProcess:
    config = gateway_config(features=False)
    if max_queue_s is not None:
        config["limits"] = {"max_queue_s": max_queue_s}
    port = free_port()
    path = _write_yaml(config, "bench-overload-")
    return ServerProcess(headstart_cmd("serve", "--config", path, "--port", str(port),
                                       "--log-level", "warning"), port).start()


async def one_burst_request(http: httpx.AsyncClient, i: int, max_tokens: int,
                            out: Outcome) -> float | None:
    """One streamed request of the burst; its TTFT when answered."""
    body = {"model": MODEL_NAME, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"Tell me about the number {i}."}]}
    started = time.perf_counter()
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code == 429:
            out.shed += 1
            out.retry_after_s.append(int(r.headers.get("retry-after", "0")))
            await r.aread()
            return None
        if r.status_code >= 500:
            out.server_errors += 1
        if r.status_code != 200:
            out.other_errors += r.status_code < 500
            await r.aread()
            return None
        ttft = None
        async for line in r.aiter_lines():
            if ttft is None and line.startswith("data: {") and '"content":"' in line:
                ttft = time.perf_counter() - started
        return ttft


async def burst(target: str, base_url: str, size: int, max_tokens: int,
                slo_ms: float) -> Outcome:
    out = Outcome(target, "burst", size)
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=600,
                                 limits=httpx.Limits(max_connections=size)) as http:
        ttfts = await asyncio.gather(*(one_burst_request(http, i, max_tokens, out)
                                       for i in range(size)))
    return out.fill([t for t in ttfts if t is not None], slo_ms, time.perf_counter() - started)


def classify(records: list[RequestRecord], out: Outcome) -> list[float]:
    """Count the measured records' outcomes into `out`; the answered ones' TTFTs."""
    ttfts = []
    for record in records:
        if record.warmup:
            continue
        out.offered += 1
        error = record.error or ""
        if record.ok and record.ttft_s is not None:
            ttfts.append(record.ttft_s)
        elif error.startswith("RateLimitError"):
            out.shed += 1
        elif error.startswith("InternalServerError") or "Error code: 5" in error:
            out.server_errors += 1
        else:
            out.other_errors += 1
    return ttfts


async def at_rate(target: str, base_url: str, rate: float, duration_s: float, seed: int,
                  slo_ms: float) -> Outcome:
    config = LoadConfig(base_url=base_url, model=MODEL_NAME, workload="chat", rate=rate,
                        duration_s=duration_s, warmup_s=5.0, seed=seed, progress=False)
    out = Outcome(target, f"rate {rate:g}/s", 0)
    ttfts = classify(await run_load(config), out)
    return out.fill(ttfts, slo_ms, duration_s)


def table(outcomes: list[Outcome]) -> str:
    rows = ["| run | gateway | offered | answered | shed (429) | 5xx | other errors | "
            "TTFT p50 / p95 of answered (ms) | answered within SLO | goodput (req/s) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        rows.append(f"| {o.kind} | {o.target} | {o.offered} | {o.answered} | {o.shed} | "
                    f"{o.server_errors} | {o.other_errors} | {o.ttft_p50_ms} / "
                    f"{o.ttft_p95_ms} | {100 * o.within_slo:.0f}% | {o.goodput_rps} |")
    return "\n".join(rows)


async def run(args: argparse.Namespace) -> list[Outcome]:
    names = {f"max_queue_s {args.max_queue_s:g}": args.max_queue_s, "no admission": None}
    if args.burst_max_queue_s != args.max_queue_s:
        names[f"max_queue_s {args.burst_max_queue_s:g}"] = args.burst_max_queue_s
    servers = {name: await asyncio.to_thread(start_gateway, q) for name, q in names.items()}
    outcomes: list[Outcome] = []
    try:
        for round_ in range(args.rounds):
            for name in (f"max_queue_s {args.burst_max_queue_s:g}", "no admission"):
                outcomes.append(await burst(name, servers[name].base_url, args.burst,
                                            args.burst_max_tokens, args.slo_ms))
                print(table(outcomes[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                await asyncio.sleep(5)  # the burst's answers drain
            for name in (f"max_queue_s {args.max_queue_s:g}", "no admission"):
                outcomes.append(await at_rate(name, servers[name].base_url + "/v1",
                                              2 * args.slo_rate, args.duration,
                                              args.seed + round_, args.slo_ms))
                print(table(outcomes[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                await asyncio.sleep(10)
    finally:
        for server in servers.values():
            server.stop()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo-rate", type=float, default=2.83,
                   help="the highest rate within the SLO (runs go at twice it)")
    p.add_argument("--max-queue-s", type=float, default=0.5)
    p.add_argument("--burst", type=int, default=48)
    p.add_argument("--burst-max-queue-s", type=float, default=1.0)
    p.add_argument("--burst-max-tokens", type=int, default=64)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--slo-ms", type=float, default=700.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-report/overload")
    args = p.parse_args(argv)
    outcomes = asyncio.run(run(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overload.json").write_text(json.dumps(
        {"args": vars(args), "runs": [asdict(o) for o in outcomes]}, indent=1))
    print(table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
