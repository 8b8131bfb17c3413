"""Admission control under overload, measured: the same gateway with and without
`limits.max_queue_s`, hit by a burst of concurrent requests and by twice the highest rate
it serves within the TTFT SLO.

    python -m bench.experiments.overload [--slo-rate 2.83] [--max-queue-s 0.25] [--burst 48]
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
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness.loadgen import LoadConfig, run_load
from bench.harness.outcomes import Tally, serve, stop_servers_on_sigterm
from bench.harness.stats import RequestRecord
from bench.harness.targets import MODEL_NAME, gateway_config
from tests.support.processes import ServerProcess


@dataclass
class Outcome:
    """One run against one gateway: the tally of its requests and what the SLO makes of it."""

    target: str
    kind: str  # burst | rate R/s
    tally: Tally = field(default_factory=Tally)
    seconds: float = 0.0
    retry_after_s: list[int] = field(default_factory=list)

    def row(self, slo_ms: float) -> str:
        t = self.tally
        good = sum(1 for s in t.ttfts_s if s * 1000 <= slo_ms)
        within = 100 * good / len(t.ttfts_s) if t.ttfts_s else 0.0
        return (f"| {self.kind} | {self.target} | {t.offered} | {t.answered} | {t.shed} | "
                f"{t.server_errors} | {t.other_errors} | {t.ttft_ms(50)} / {t.ttft_ms(95)} | "
                f"{within:.0f}% | {good / self.seconds:.2f} |")

    def to_json(self) -> dict:
        return {"target": self.target, "kind": self.kind, **self.tally.to_json(),
                "seconds": round(self.seconds, 1), "retry_after_s": self.retry_after_s}


def start_gateway(max_queue_s: float | None) -> ServerProcess:
    config = gateway_config(features=False)
    if max_queue_s is not None:
        config["limits"] = {"max_queue_s": max_queue_s}
    return serve(config, "bench-overload-")


async def one_burst_request(http: httpx.AsyncClient, i: int, max_tokens: int,
                            out: Outcome) -> None:
    """One streamed request of the burst, counted into `out` as the load generator would."""
    body = {"model": MODEL_NAME, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"Tell me about the number {i}."}]}
    record = RequestRecord(session_id=f"burst-{i}", turn=0, sent_s=0.0)
    started = time.perf_counter()
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            name = "RateLimitError" if r.status_code == 429 else "APIStatusError"
            record.error = f"{name}: Error code: {r.status_code}"
            if r.status_code == 429:
                out.retry_after_s.append(int(r.headers.get("retry-after", "0")))
        else:
            async for line in r.aiter_lines():
                if record.ttft_s is None and line.startswith("data: {") and '"content":"' in line:
                    record.ttft_s = time.perf_counter() - started
            record.e2e_s = time.perf_counter() - started
    out.tally.add(record)


async def burst(target: str, base_url: str, size: int, max_tokens: int) -> Outcome:
    out = Outcome(target, "burst")
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=600,
                                 limits=httpx.Limits(max_connections=size)) as http:
        await asyncio.gather(*(one_burst_request(http, i, max_tokens, out)
                               for i in range(size)))
    out.seconds = time.perf_counter() - started
    return out


async def at_rate(target: str, base_url: str, rate: float, duration_s: float,
                  seed: int) -> Outcome:
    config = LoadConfig(base_url=base_url, model=MODEL_NAME, workload="chat", rate=rate,
                        duration_s=duration_s, warmup_s=5.0, seed=seed, progress=False)
    out = Outcome(target, f"rate {rate:g}/s", seconds=duration_s)
    for record in await run_load(config):
        if not record.warmup:
            out.tally.add(record)
    return out


def table(outcomes: list[Outcome], slo_ms: float) -> str:
    rows = ["| run | gateway | offered | answered | shed (429) | 5xx | other errors | "
            "TTFT p50 / p95 of answered (ms) | answered within SLO | goodput (req/s) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    return "\n".join(rows + [o.row(slo_ms) for o in outcomes])


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
                                            args.burst_max_tokens))
                print(outcomes[-1].row(args.slo_ms), file=sys.stderr, flush=True)
                await asyncio.sleep(5)  # the burst's answers drain
            for name in (f"max_queue_s {args.max_queue_s:g}", "no admission"):
                outcomes.append(await at_rate(name, servers[name].base_url + "/v1",
                                              2 * args.slo_rate, args.duration,
                                              args.seed + round_))
                print(outcomes[-1].row(args.slo_ms), file=sys.stderr, flush=True)
                await asyncio.sleep(10)
    finally:
        for server in servers.values():
            server.stop()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.overload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo-rate", type=float, default=2.83,
                   help="the highest rate within the SLO (runs go at twice it)")
    # the 700 ms SLO minus a cold chat turn's own prefill here: the limit bounds the wait only
    p.add_argument("--max-queue-s", type=float, default=0.25)
    p.add_argument("--burst", type=int, default=48)
    p.add_argument("--burst-max-queue-s", type=float, default=1.0)
    p.add_argument("--burst-max-tokens", type=int, default=64)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--slo-ms", type=float, default=700.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-report/overload")
    args = p.parse_args(argv)
    stop_servers_on_sigterm()
    outcomes = asyncio.run(run(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overload.json").write_text(json.dumps(
        {"args": vars(args), "runs": [o.to_json() for o in outcomes]}, indent=1))
    print(table(outcomes, args.slo_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
