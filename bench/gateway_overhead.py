"""The gateway's own cost: the same short requests to a `headstart engine` directly and
through `headstart serve` (an `openai`-kind passthrough route, caches off), interleaved in
one run so every path sees the same machine load. Optionally LiteLLM's proxy in front of
the same engine, in the same loop (`--litellm-proxy PATH_TO_litellm`, from a separate venv
with `litellm[proxy]`).

    python -m bench.gateway_overhead [--requests 200] [--engine-url URL]
                                     [--litellm-proxy BIN] [--out DIR] [--workers N]

Reports p50/p99 per path and the added latency (proxy − direct) at p50 and p99, for
non-streaming requests (whole answer) and streaming ones (first byte), plus each proxy's
CPU time per request (its cost, whatever the machine's load). Targets: ≤ 1 ms p50 and
≤ 5 ms p99 added (LiteLLM's proxy publishes 12 ms median and 43 ms p99).
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

from bench.processes import ServerProcess, free_port, headstart_cmd

MODEL = "smollm2-135m-instruct"
TARGET_P50_MS, TARGET_P99_MS = 1.0, 5.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process and its children (`--workers`) have used (Linux
    /proc), in seconds."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # itself or a child
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def start_headstart(engine_url: str, workdir: Path, workers: int = 1) -> ServerProcess:
    config = workdir / "passthrough.yaml"
    config.write_text(
        "upstreams:\n"
        f"  engine: {{kind: openai, base_url: '{engine_url}/v1', model: {MODEL}}}\n"
        "routes:\n"
        "  - {name: passthrough, models: ['*'], upstream: engine}\n")
    port = free_port()
    extra = ["--workers", str(workers)] if workers > 1 else []
    return ServerProcess(headstart_cmd("serve", "--config", str(config), "--port", str(port),
                                       "--log-level", "warning", *extra), port,
                         timeout_s=120).start()


def start_litellm_proxy(binary: str, engine_url: str, workdir: Path) -> ServerProcess:
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {engine_url}/v1\n"
        "      api_key: none\n")
    port = free_port()
    env = {"LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true", "LITELLM_LOG": "ERROR"}
    return ServerProcess([binary, "--config", str(config), "--port", str(port), "--host",
                          "127.0.0.1", "--num_workers", "1"], port,
                         health_path="/health/liveliness", env=env, timeout_s=180).start()


def one(client: httpx.Client, url: str, body: dict, stream: bool) -> float:
    """Seconds to the whole answer (stream=False) or to the first body byte (stream)."""
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


def measure(paths: dict[str, tuple[str, int | None]], n: int, stream: bool) -> dict:
    """Interleaved requests over every path (rotating the order); ms percentiles per path."""
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Reply with one word: ok."}]}
    names = list(paths)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = {}
    with httpx.Client(timeout=60) as client:
        for _ in range(10):  # warm up connections and the engine's prefix cache
            for url, _pid in paths.values():
                one(client, url + "/v1/chat/completions", body, stream)
        cpu0 = {name: cpu_seconds(pid) for name, (_, pid) in paths.items() if pid}
        for i in range(n):
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                times[name].append(one(client, paths[name][0] + "/v1/chat/completions",
                                       body, stream))
        for name, start in cpu0.items():
            cpu[name] = (cpu_seconds(paths[name][1]) - start) * 1000 / n
    result: dict = {"requests": n}
    for name, vals in times.items():
        ms = [v * 1000 for v in vals]
        result[name] = {"p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99),
                        "mean_ms": statistics.fmean(ms), "cpu_ms_per_request": cpu.get(name)}
    for name in names[1:]:
        result[name]["added_p50_ms"] = result[name]["p50_ms"] - result["direct"]["p50_ms"]
        result[name]["added_p99_ms"] = result[name]["p99_ms"] - result["direct"]["p99_ms"]
    return result


def table(results: dict) -> str:
    lines = ["| mode | path | p50 | p99 | added p50 | added p99 | proxy CPU/request |",
             "|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        for name, row in r.items():
            if not isinstance(row, dict):
                continue
            added = (f"**{row['added_p50_ms']:.2f}** | **{row['added_p99_ms']:.2f}**"
                     if "added_p50_ms" in row else "– | –")
            cpu = f"{row['cpu_ms_per_request']:.2f}" if row["cpu_ms_per_request"] else "–"
            lines.append(f"| {mode} | {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
                         f"{added} | {cpu} |")
    lines.append(f"\nms, {next(iter(results.values()))['requests']} requests per path and mode, "
                 f"interleaved. Targets: added ≤ {TARGET_P50_MS} ms p50, ≤ {TARGET_P99_MS} ms "
                 "p99 (LiteLLM proxy publishes 12 ms / 43 ms). `proxy CPU/request`: the proxy "
                 "process's user+system CPU time per request, its cost whatever the load.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per path and mode")
    parser.add_argument("--engine-url", help="an already running `headstart engine`")
    parser.add_argument("--litellm-proxy", help="the `litellm` proxy binary to compare with")
    parser.add_argument("--out", help="directory for gateway_overhead.json")
    parser.add_argument("--workers", type=int, default=1,
                        help="gateway processes (CPU/request counts them all)")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="headstart-bench-"))
    servers: list[ServerProcess] = []
    try:
        if args.engine_url:
            engine_url = args.engine_url.rstrip("/")
        else:
            port = free_port()
            servers.append(ServerProcess(headstart_cmd("engine", "--port", str(port)),
                                         port).start())
            engine_url = servers[-1].base_url
        paths: dict[str, tuple[str, int | None]] = {"direct": (engine_url, None)}
        servers.append(start_headstart(engine_url, workdir, args.workers))
        paths["headstart"] = (servers[-1].base_url, servers[-1].proc.pid)
        if args.litellm_proxy:
            servers.append(start_litellm_proxy(args.litellm_proxy, engine_url, workdir))
            paths["litellm-proxy"] = (servers[-1].base_url, servers[-1].proc.pid)
        results = {mode: measure(paths, args.requests, mode == "stream")
                   for mode in ("non-stream", "stream")}
    finally:
        for server in reversed(servers):
            server.stop()
    print(table(results))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gateway_overhead.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
