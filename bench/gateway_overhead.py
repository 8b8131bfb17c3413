"""The gateway's own cost: the same short requests to a `headstart engine` directly and
through `headstart serve` (an `openai`-kind passthrough route, caches off), interleaved in
one run, so both see the same machine load.

    python -m bench.gateway_overhead [--requests 200] [--engine-url URL] [--out DIR]

Reports p50/p99 of each path and the added latency (gateway − direct) at p50 and p99, for
non-streaming requests (total time) and streaming ones (time to first byte). Targets:
≤ 1 ms p50, ≤ 5 ms p99 (LiteLLM's proxy publishes 12 ms median and 43 ms p99).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.processes import ServerProcess, free_port, headstart_cmd

MODEL = "smollm2-135m-instruct"
TARGET_P50_MS, TARGET_P99_MS = 1.0, 5.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def start_gateway(engine_url: str) -> ServerProcess:
    config = Path(tempfile.mkdtemp(prefix="headstart-bench-")) / "passthrough.yaml"
    config.write_text(
        "upstreams:\n"
        f"  engine: {{kind: openai, base_url: '{engine_url}/v1', model: {MODEL}}}\n"
        "routes:\n"
        "  - {name: passthrough, models: ['*'], upstream: engine}\n")
    port = free_port()
    return ServerProcess(headstart_cmd("serve", "--config", str(config), "--port", str(port),
                                       "--log-level", "warning"), port, timeout_s=120).start()


def one(client: httpx.Client, url: str, body: dict, stream: bool) -> float:
    """Seconds to the full answer (stream=False) or to the first content byte (stream)."""
    t0 = time.perf_counter()
    if not stream:
        r = client.post(url, json=body)
        r.raise_for_status()
        return time.perf_counter() - t0
    with client.stream("POST", url, json={**body, "stream": True}) as r:
        r.raise_for_status()
        for _ in r.iter_bytes():
            return time.perf_counter() - t0
    raise RuntimeError("empty stream")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(engine_url: str, gateway_url: str, n: int, stream: bool,
            gateway_pid: int | None = None) -> dict:
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Reply with one word: ok."}]}
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    urls = {"direct": engine_url + "/v1/chat/completions",
            "gateway": gateway_url + "/v1/chat/completions"}
    with httpx.Client(timeout=60) as client:
        for _ in range(10):  # warm up connections and the engine's prefix cache
            for url in urls.values():
                one(client, url, body, stream)
        cpu0 = cpu_seconds(gateway_pid) if gateway_pid else 0.0
        for i in range(n):
            order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
            for name in order:
                times[name].append(one(client, urls[name], body, stream))
        cpu = (cpu_seconds(gateway_pid) - cpu0) if gateway_pid else float("nan")
    ms = {k: [v * 1000 for v in vals] for k, vals in times.items()}
    row = {name: {"p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99),
                  "mean_ms": statistics.fmean(v)} for name, v in ms.items()}
    row["added_p50_ms"] = row["gateway"]["p50_ms"] - row["direct"]["p50_ms"]
    row["added_p99_ms"] = row["gateway"]["p99_ms"] - row["direct"]["p99_ms"]
    row["gateway_cpu_ms_per_request"] = cpu * 1000 / n
    row["requests"] = n
    return row


def table(results: dict) -> str:
    lines = ["| mode | direct p50 | gateway p50 | added p50 | direct p99 | gateway p99 | "
             "added p99 | gateway CPU/request |", "|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        lines.append(f"| {mode} | {r['direct']['p50_ms']:.2f} | {r['gateway']['p50_ms']:.2f} | "
                     f"**{r['added_p50_ms']:.2f}** | {r['direct']['p99_ms']:.2f} | "
                     f"{r['gateway']['p99_ms']:.2f} | **{r['added_p99_ms']:.2f}** | "
                     f"{r['gateway_cpu_ms_per_request']:.2f} |")
    lines.append(f"\nms; targets: added ≤ {TARGET_P50_MS} ms p50, ≤ {TARGET_P99_MS} ms p99 "
                 "(LiteLLM proxy publishes 12 ms / 43 ms). `gateway CPU/request` is the "
                 "gateway process's user+system CPU time per request: its cost independent "
                 "of how loaded the machine is.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per path and mode")
    parser.add_argument("--engine-url", help="an already running `headstart engine`")
    parser.add_argument("--out", help="directory for gateway_overhead.json")
    args = parser.parse_args(argv)

    engine = None
    if args.engine_url:
        engine_url = args.engine_url.rstrip("/")
    else:
        port = free_port()
        engine = ServerProcess(headstart_cmd("engine", "--port", str(port)), port).start()
        engine_url = engine.base_url
    gateway = start_gateway(engine_url)
    try:
        pid = gateway.proc.pid if gateway.proc else None
        results = {mode: measure(engine_url, gateway.base_url, args.requests, mode == "stream",
                                 pid) for mode in ("non-stream", "stream")}
    finally:
        gateway.stop()
        if engine is not None:
            engine.stop()
    print(table(results))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gateway_overhead.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
