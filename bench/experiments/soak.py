"""A soak: steady load for a long time, watching what the server keeps.

    python -m bench.experiments.soak [--share 0.7 --slo-rate 2.0 | --rate R] [--duration 1800]
                                     [--base-url URL --pid PID] [--workload chat] [--out DIR]
    headstart bench --soak ...   (the same, from the bench command)

Without `--base-url` it starts `headstart serve` with every feature on (`make bench`'s
`headstart` target) and watches that process; with one, `--pid` names the process to
watch. The load is the load generator's open-loop Poisson arrivals at `share` of the
highest rate within the SLO (`--slo-rate`, default `make bench`'s chat result). Every
`--sample-s` the server's resident memory is read; the verdict compares the last sample
with the first one after the warm-up (the heap a server grows into on its first requests
is not a leak). It passes with no 5xx and resident memory grown by at most `--max-growth`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.harness.loadgen import LoadConfig, run_load
from bench.harness.outcomes import Tally, serve, stop_servers_on_sigterm
from bench.harness.targets import MODEL_NAME, gateway_config
from tests.support.processes import ServerProcess


@dataclass
class SoakReport:
    rate: float
    duration_s: float
    tally: Tally = field(default_factory=Tally)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MB)
    rss_start_mb: float = 0.0  # first sample after the warm-up
    rss_end_mb: float = 0.0
    growth: float = 0.0  # end / start - 1
    max_growth: float = 0.10

    @property
    def passed(self) -> bool:
        return self.tally.server_errors == 0 and self.growth <= self.max_growth

    def summary(self) -> str:
        t = self.tally
        return (f"soak {self.duration_s:g}s at {self.rate:g} req/s: {t.offered} requests, "
                f"{t.answered} answered, {t.shed} shed, {t.server_errors} 5xx, "
                f"{t.other_errors} other errors, p95 TTFT {t.ttft_ms(95)} ms; resident "
                f"memory {self.rss_start_mb:.0f} -> {self.rss_end_mb:.0f} MB "
                f"({100 * self.growth:+.1f}%, limit +{100 * self.max_growth:.0f}%): "
                f"{'pass' if self.passed else 'FAIL'}")

    def to_json(self) -> dict:
        return {"rate": self.rate, "duration_s": self.duration_s, **self.tally.to_json(),
                "rss_mb": self.rss_mb, "rss_start_mb": round(self.rss_start_mb, 1),
                "rss_end_mb": round(self.rss_end_mb, 1), "growth": round(self.growth, 4),
                "max_growth": self.max_growth, "passed": self.passed}


async def watch_memory(pid: int, every_s: float, report: SoakReport, t0: float) -> None:
    process = psutil.Process(pid)
    while True:
        rss = process.memory_info().rss / 2**20
        report.rss_mb.append((round(time.perf_counter() - t0, 1), round(rss, 1)))
        await asyncio.sleep(every_s)


async def soak(base_url: str, pid: int, rate: float, duration_s: float, *,
               warmup_s: float = 60.0, sample_s: float = 10.0, workload: str = "chat",
               max_growth: float = 0.10, seed: int = 0) -> SoakReport:
    """Run the load and sample `pid`'s resident memory; the verdict."""
    report = SoakReport(rate, duration_s, max_growth=max_growth)
    config = LoadConfig(base_url=base_url, model=MODEL_NAME, workload=workload, rate=rate,
                        duration_s=duration_s, warmup_s=0.0, seed=seed, progress=False)
    t0 = time.perf_counter()
    watcher = asyncio.create_task(watch_memory(pid, sample_s, report, t0))
    try:
        records = await run_load(config)
    finally:
        watcher.cancel()
    report.rss_end_mb = psutil.Process(pid).memory_info().rss / 2**20
    report.rss_mb.append((round(time.perf_counter() - t0, 1), round(report.rss_end_mb, 1)))
    after = [mb for at, mb in report.rss_mb if at >= warmup_s] or [report.rss_mb[0][1]]
    report.rss_start_mb = after[0]
    report.growth = report.rss_end_mb / report.rss_start_mb - 1
    for record in records:
        report.tally.add(record)
    return report


def start_server() -> ServerProcess:
    """`headstart serve` with every feature on (`make bench`'s `headstart`)."""
    return serve(gateway_config(features=True), "bench-soak-")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="a running server (default: start headstart serve)")
    p.add_argument("--pid", type=int, help="the process to watch, with --base-url")
    p.add_argument("--slo-rate", type=float, default=2.0,
                   help="the highest rate within the SLO (default: make bench's chat result)")
    p.add_argument("--share", type=float, default=0.7, help="share of --slo-rate to offer")
    p.add_argument("--rate", type=float, help="requests per second (overrides --share)")
    p.add_argument("--duration", type=float, default=1800.0)
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--max-growth", type=float, default=0.10)
    p.add_argument("--workload", default="chat")
    p.add_argument("--out", default="bench-report/soak")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.base_url and not args.pid:
        print("bench.experiments.soak: --base-url needs --pid (the server process to watch)",
              file=sys.stderr)
        return 2
    stop_servers_on_sigterm()
    server = None if args.base_url else start_server()
    base_url = args.base_url or server.base_url + "/v1"
    pid = args.pid or server.proc.pid
    rate = args.rate or args.share * args.slo_rate
    try:
        report = asyncio.run(soak(base_url, pid, rate, args.duration, warmup_s=args.warmup_s,
                                  sample_s=args.sample_s, workload=args.workload,
                                  max_growth=args.max_growth))
    finally:
        if server is not None:
            server.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report.to_json(), indent=1))
    print(report.summary())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
