"""What an open dashboard costs the gateway: the CPU time of `headstart serve` (the embedded
default unless `--config`: the engine in the same process) over windows with no client and
windows with one client polling `/dashboard/data` once a second, as the page does,
interleaved so both see the same machine load; then a burst of back-to-back polls for the
CPU of one poll.

    python -m bench.experiments.dashboard_cost [--seconds 60] [--rounds 2] [--burst 300]
                                               [--config FILE] [--admin-key KEY] [--out DIR]

Before timing, a few chat requests give the metrics their label sets (routes, cache
outcomes, histograms), so each poll carries a realistic body. CPU is the sum of the
process's thread run times (`bench.experiments.gateway_overhead.cpu_seconds`). Target: the polling
windows cost < 1% of one core more than the idle ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench.experiments.gateway_overhead import cpu_seconds
from tests.support.processes import ServerProcess, free_port, headstart_cmd

WARM_QUESTIONS = ("What is the capital of France?", "Name a primary colour.",
                  "What is 2+2?", "Say hello in French.")


def start_gateway(config: str | None) -> ServerProcess:
    port = free_port()
    args = ["serve", "--port", str(port)] + (["--config", config] if config else [])
    return ServerProcess(headstart_cmd(*args), port).start()


def warm(base_url: str, model: str, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
        for question in WARM_QUESTIONS * 2:
            client.post("/v1/chat/completions", json={
                "model": model, "max_tokens": 8,
                "messages": [{"role": "user", "content": question}]}).raise_for_status()


def window(pid: int, seconds: float, poll: httpx.Client | None) -> dict[str, float]:
    """CPU seconds the process used over `seconds`, polled once a second when `poll`."""
    polls, size = 0, 0
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    while (now := time.monotonic()) < t0 + seconds:
        if poll is not None:
            size = len(poll.get("/dashboard/data").raise_for_status().content)
            polls += 1
            time.sleep(max(0.0, t0 + polls - time.monotonic()))
        else:
            time.sleep(min(1.0, t0 + seconds - now))
    wall = time.monotonic() - t0
    used = cpu_seconds(pid) - c0
    return {"wall_s": wall, "cpu_s": used, "cpu_pct": 100 * used / wall, "polls": polls,
            "bytes": size}


def burst(pid: int, client: httpx.Client, n: int, idle_rate: float) -> float:
    """CPU ms per poll over `n` back-to-back polls, less the idle rate over their time."""
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    for _ in range(n):
        client.get("/dashboard/data").raise_for_status()
    wall, used = time.monotonic() - t0, cpu_seconds(pid) - c0
    return 1000 * (used - idle_rate * wall) / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.dashboard_cost",
                                description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="length of each window")
    p.add_argument("--rounds", type=int, default=2, help="idle + polling windows, interleaved")
    p.add_argument("--burst", type=int, default=300, help="back-to-back polls at the end")
    p.add_argument("--config", help="gateway config (default: the embedded default)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="model for the warm-up")
    p.add_argument("--admin-key", help="sent as a Bearer header when the gateway needs it")
    p.add_argument("--out", help="folder for dashboard_cost.json")
    args = p.parse_args(argv)

    headers = {"Authorization": f"Bearer {args.admin_key}"} if args.admin_key else {}
    server = start_gateway(args.config)
    try:
        pid = server.proc.pid
        warm(server.base_url, args.model, headers)
        windows: dict[str, list[dict[str, float]]] = {"idle": [], "polling": []}
        with httpx.Client(base_url=server.base_url, headers=headers) as client:
            client.get("/dashboard/data").raise_for_status()
            for r in range(args.rounds):
                order = ("idle", "polling") if r % 2 == 0 else ("polling", "idle")
                for phase in order:
                    result = window(pid, args.seconds, client if phase == "polling" else None)
                    windows[phase].append(result)
                    print(f"[dashboard_cost] round {r + 1} {phase:8s} "
                          f"{result['cpu_s']:.3f} CPU s over {result['wall_s']:.1f} s "
                          f"= {result['cpu_pct']:.3f}% of a core", file=sys.stderr, flush=True)
            idle_rate = statistics.mean(w["cpu_s"] / w["wall_s"] for w in windows["idle"])
            per_poll_ms = burst(pid, client, args.burst, idle_rate)
    finally:
        server.stop()
    idle_pct = statistics.mean(w["cpu_pct"] for w in windows["idle"])
    polling_pct = statistics.mean(w["cpu_pct"] for w in windows["polling"])
    report = {"seconds": args.seconds, "rounds": args.rounds, "windows": windows,
              "idle_cpu_pct": idle_pct, "polling_cpu_pct": polling_pct,
              "added_cpu_pct": polling_pct - idle_pct,
              "pairs": [p["cpu_pct"] - i["cpu_pct"]
                        for i, p in zip(windows["idle"], windows["polling"], strict=True)],
              "burst_polls": args.burst, "cpu_ms_per_poll": per_poll_ms,
              "poll_bytes": windows["polling"][-1]["bytes"], "target_pct": 1.0}
    print(f"idle {idle_pct:.3f}% · polling once a second {polling_pct:.3f}% · added "
          f"{report['added_cpu_pct']:+.3f}% of a core (per round: "
          + ", ".join(f"{d:+.3f}" for d in report["pairs"])
          + f"); one poll {per_poll_ms:.2f} ms CPU ({per_poll_ms / 10:.3f}% of a core at 1/s), "
          f"{report['poll_bytes']} bytes")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "dashboard_cost.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
