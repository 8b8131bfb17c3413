"""The gateway's own cost: the same short requests to a `headstart engine` directly and
through `headstart serve` (an `openai`-kind passthrough route, caches off), interleaved in
one run so every path sees the same machine load. Optionally LiteLLM's proxy in front of
the same engine, in the same loop (`--litellm-proxy PATH_TO_litellm`, from a separate venv
with `litellm[proxy]`).

    python -m bench.experiments.gateway_overhead [--requests 200] [--engine-url URL]
                                                 [--litellm-proxy BIN] [--out DIR] [--workers N]
                                                 [--engine-env KEY=VALUE ...] [--canned-upstream MS]
                                                 [--nginx [BIN]] [--bundled-engine]

What it measures: one client (httpx, keep-alive) sends the same request (`max_tokens: 1`, a
fixed prompt) to each path in turn, rotating which goes first, so the paths see the same
engine, prompt-cache state and machine load. The added latency of a proxy is its p50 (p99)
minus the direct path's p50 (p99): the proxy's own processing plus the extra loopback HTTP
hop (the client's connection to the proxy and the proxy's to the engine), which is the price
of any gateway. The engine's own jitter (tens of ms on a busy machine) dwarfs a 1 ms
difference, so each added p50 comes with a 95% bootstrap interval and the median of the
per-round differences (proxy − direct in the same round, robust to load drifting during the
run). Streaming requests are timed to the first body byte (the first token); non-streaming
ones to the whole answer. `stream-wire` times the same streams to their first frame on a raw
socket, without the client's HTTP parsing (`WireClient` says why the two differ, by
0.1–0.2 ms here, for Headstart and not for nginx). `proxy CPU/request` is the proxy process's CPU
time over the timed requests divided by their number: its cost whatever the load, and the
steadiest number here; `net of idle` subtracts what the process burns with no request in
flight (uvicorn's 10 Hz tick and other timers, measured over 3 s before the timed loop),
which otherwise grows with the engine's latency rather than with the proxy's work.
`--engine-env OMP_WAIT_POLICY=PASSIVE` starts the engine with that environment (every path
talks to the same engine): after each forward pass libgomp's worker threads spin-wait on the
cores (by default), which the proxies need right then to forward the answer. Targets: ≤ 1 ms
p50 and ≤ 5 ms p99 added (LiteLLM's proxy publishes 12 ms median and 43 ms p99).

`--bundled-engine` adds `headstart serve` with the engine in its own process (the embedded
default's shape, kind `engine`: no hop to an upstream) on its own passthrough route. Its
"added" latency is then the gateway's HTTP and pipeline against the engine server's own
HTTP layer; both run the same engine code, one copy each, in turn.

`--nginx` adds nginx as a plain keep-alive reverse proxy in front of the same upstream, in
the same loop: the cost of the extra hop alone on this machine, a floor for any gateway.
`--canned-upstream MS` puts `bench/experiments/canned_upstream.py` in the engine's place: the same
one-token answer after MS milliseconds, with no jitter and no CPU of its own. With 0 the
proxy runs hot, request after request; with 25 (an engine step) it idles between them as
in front of the engine, which on a shared virtual machine is enough to run its code from
cold caches: the difference between the two is the machine's, the rest is the proxy's.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.support.processes import ServerProcess, free_port, headstart_cmd

MODEL = "smollm2-135m-instruct"
TARGET_P50_MS, TARGET_P99_MS = 1.0, 5.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def added_p50_interval(proxy: list[float], direct: list[float], rounds: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of p50(proxy) − p50(direct), resampling each path."""
    rng = random.Random(seed)
    diffs = sorted(statistics.median(rng.choices(proxy, k=len(proxy)))
                   - statistics.median(rng.choices(direct, k=len(direct)))
                   for _ in range(rounds))
    return diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds) - 1]


def cpu_seconds(pid: int) -> float:
    """CPU time a process and its children (`--workers`) have used, in seconds: the sum of
    their threads' scheduler run times (Linux /proc/*/task/*/schedstat, in ns; the 10 ms
    ticks of /proc/*/stat are too coarse for idle windows)."""
    total_ns = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if stat.parent.name != str(pid) and fields[1] != str(pid):
                continue  # neither the process nor one of its children
            for task in (stat.parent / "task").iterdir():
                total_ns += int((task / "schedstat").read_text().split()[0])
        except OSError:  # the process or a thread ended meanwhile
            continue
    return total_ns / 1e9


def idle_cpu_rate(pids: dict[str, int], seconds: float = 3.0) -> dict[str, float]:
    """CPU seconds per second each process uses with no request in flight (timers, e.g.
    uvicorn's 10 Hz tick): charged to requests it would grow with the engine's latency."""
    if not pids:
        return {}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: (cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}


def start_headstart(engine_url: str | None, workdir: Path, workers: int = 1,
                    env: dict[str, str] | None = None) -> ServerProcess:
    """`headstart serve` with one passthrough route (no cache, no transforms) to the engine
    at `engine_url`, or with `None` to the bundled engine in its own process."""
    upstream = (f"{{kind: openai, base_url: '{engine_url}/v1', model: {MODEL}}}" if engine_url
                else f"{{kind: engine, model: {MODEL}}}")
    config = workdir / ("passthrough.yaml" if engine_url else "bundled.yaml")
    config.write_text(
        f"upstreams:\n  engine: {upstream}\n"
        "routes:\n"
        "  - {name: passthrough, models: ['*'], upstream: engine}\n")
    port = free_port()
    extra = ["--workers", str(workers)] if workers > 1 else []
    return ServerProcess(headstart_cmd("serve", "--config", str(config), "--port", str(port),
                                       "--log-level", "warning", *extra), port,
                         env=env, timeout_s=120).start()


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


def start_nginx(binary: str, engine_url: str, workdir: Path) -> ServerProcess:
    """nginx as a plain keep-alive reverse proxy in front of the same upstream: what one
    extra loopback hop costs on this machine when the proxy itself does almost nothing."""
    port = free_port()
    upstream = engine_url.split("://", 1)[1]
    conf = workdir / "nginx.conf"
    conf.write_text(
        f"worker_processes 1; daemon off; master_process off; pid {workdir}/nginx.pid;\n"
        f"error_log {workdir}/nginx-error.log;\n"
        "events { worker_connections 64; }\n"
        f"http {{ access_log off; upstream engine {{ server {upstream}; keepalive 8; }}\n"
        f"  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://engine;\n"
        "    proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; } } }\n")
    return ServerProcess([binary, "-c", str(conf), "-p", str(workdir)], port).start()


def one(client: httpx.Client, url: str, body: dict, stream: bool) -> float:
    """Seconds to the whole answer (stream=False) or to the first body byte (stream; the
    stream is still read to its end so the connection is kept)."""
    t0 = time.perf_counter()
    if not stream:
        r = client.post(url, json=body)
        r.raise_for_status()
        return time.perf_counter() - t0
    first = None
    with client.stream("POST", url, json={**body, "stream": True}) as r:
        r.raise_for_status()
        for _ in r.iter_bytes():  # read to the end, as a streaming client does: leaving
            if first is None:  # early would close both connections (and abort upstream)
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("empty stream")
    return first


class WireClient:
    """One keep-alive socket to a path, speaking HTTP by hand: a stream's first frame timed
    as its bytes arrive, with no HTTP client's parsing in the time. An httpx client reads
    the engine's headers while the engine still renders its first frame (they come about
    0.1 ms apart), and nginx's as soon as the engine's pass through, but Headstart's only
    with that frame: it holds them until the first chunk, so that an upstream failing
    before any token still gets an error status and the fallback. The `stream` mode
    counts the client's parsing of those headers against Headstart; this one does not."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host = parts.netloc.encode()

    def first_frame(self, body: dict) -> float:
        """Seconds to the first `data:` bytes of a streamed answer to `body`; the answer is
        read to its end, so the connection is kept."""
        data = json.dumps({**body, "stream": True}).encode()
        request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\ncontent-type: "
                   b"application/json\r\ncontent-length: %d\r\n\r\n%b" % (self.host, len(data), data))
        t0 = time.perf_counter()
        self.sock.sendall(request)
        got = self._recv(b"")
        while b"\r\n\r\n" not in got:
            got = self._recv(got)
        if not got.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"not a 200 stream: {got[:200]!r}")
        while b"data:" not in got:
            got = self._recv(got)
        first = time.perf_counter() - t0
        head, _, rest = got.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                       if line.startswith(b"content-length:")), None)
        while len(rest) < length if length is not None else not rest.endswith(b"0\r\n\r\n"):
            rest = self._recv(rest)  # to the body's end: its length, or the last chunk
        return first

    def _recv(self, got: bytes) -> bytes:
        piece = self.sock.recv(65536)
        if not piece:
            raise RuntimeError(f"connection closed mid-answer after {got[:200]!r}")
        return got + piece

    def close(self) -> None:
        self.sock.close()


MODES = ("non-stream", "stream", "stream-wire")


def measure(paths: dict[str, tuple[str, int | None]], n: int, mode: str) -> dict:
    """Interleaved requests over every path (rotating the order); ms percentiles per path.
    `mode`: one of `MODES`."""
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Reply with one word: ok."}]}
    names = list(paths)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = {}
    wires = {name: WireClient(url) for name, (url, _) in paths.items()} \
        if mode == "stream-wire" else {}
    with httpx.Client(timeout=60) as client:

        def timed(name: str) -> float:
            if wires:
                return wires[name].first_frame(body)
            return one(client, paths[name][0] + "/v1/chat/completions", body, mode == "stream")

        try:
            for _ in range(10):  # warm up connections and the engine's prefix cache
                for name in names:
                    timed(name)
            pids = {name: pid for name, (_, pid) in paths.items() if pid}
            idle = idle_cpu_rate(pids)
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            t0 = time.perf_counter()
            for i in range(n):
                for j in range(len(names)):
                    name = names[(i + j) % len(names)]
                    times[name].append(timed(name))
            elapsed = time.perf_counter() - t0
        finally:
            for wire in wires.values():
                wire.close()
        for name, start in cpu0.items():
            used = cpu_seconds(pids[name]) - start
            cpu[name] = (used * 1000 / n, (used - idle[name] * elapsed) * 1000 / n)
    result: dict = {"requests": n}
    for name, vals in times.items():
        ms = [v * 1000 for v in vals]
        raw_cpu, net_cpu = cpu.get(name, (None, None))
        result[name] = {"p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99),
                        "mean_ms": statistics.fmean(ms), "cpu_ms_per_request": raw_cpu,
                        "cpu_ms_per_request_net_of_idle": net_cpu}
    direct = [v * 1000 for v in times["direct"]]
    for name in names[1:]:
        proxy = [v * 1000 for v in times[name]]
        result[name]["added_p50_ms"] = result[name]["p50_ms"] - result["direct"]["p50_ms"]
        result[name]["added_p99_ms"] = result[name]["p99_ms"] - result["direct"]["p99_ms"]
        result[name]["added_p50_ci_ms"] = added_p50_interval(proxy, direct)
        result[name]["paired_added_median_ms"] = statistics.median(
            p - d for p, d in zip(proxy, direct, strict=True))
    return result


def table(results: dict) -> str:
    lines = ["| mode | path | p50 | p99 | added p50 | added p99 | added p50 95% CI "
             "| paired added median | proxy CPU/request | net of idle |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        for name, row in r.items():
            if not isinstance(row, dict):
                continue
            added = "– | – | – | –"
            net = row.get("cpu_ms_per_request_net_of_idle")
            if "added_p50_ms" in row:
                lo, hi = row["added_p50_ci_ms"]
                added = (f"**{row['added_p50_ms']:.2f}** | **{row['added_p99_ms']:.2f}** | "
                         f"{lo:.2f} … {hi:.2f} | {row['paired_added_median_ms']:.2f}")
            cpu = (f"{row['cpu_ms_per_request']:.2f} | {net:.2f}"
                   if row["cpu_ms_per_request"] is not None else "– | –")
            lines.append(f"| {mode} | {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
                         f"{added} | {cpu} |")
    lines.append(f"\nms, {next(iter(results.values()))['requests']} requests per path and mode, "
                 f"interleaved. Targets: added ≤ {TARGET_P50_MS} ms p50, ≤ {TARGET_P99_MS} ms "
                 "p99 (LiteLLM proxy publishes 12 ms / 43 ms). `paired added median`: median "
                 "over rounds of (proxy − direct) in the same round. `proxy CPU/request`: the "
                 "proxy process's CPU time per request, its cost whatever the load; `net of "
                 "idle`: less what it burns with nothing in flight (measured just before).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.gateway_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per path and mode")
    parser.add_argument("--engine-url", help="an already running `headstart engine`")
    parser.add_argument("--litellm-proxy", help="the `litellm` proxy binary to compare with")
    parser.add_argument("--out", help="directory for gateway_overhead.json")
    parser.add_argument("--workers", type=int, default=1,
                        help="gateway processes (CPU/request counts them all)")
    parser.add_argument("--engine-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the engine this starts, and of the"
                        " --bundled-engine gateway (repeatable)")
    parser.add_argument("--nginx", nargs="?", const="nginx", metavar="BIN",
                        help="also nginx as a plain reverse proxy (the cost of the hop alone)")
    parser.add_argument("--canned-upstream", type=float, metavar="MS",
                        help="a canned answer after MS ms in place of the engine")
    parser.add_argument("--bundled-engine", action="store_true",
                        help="also `headstart serve` running the engine in its own process")
    args = parser.parse_args(argv)
    if args.bundled_engine and (args.canned_upstream is not None or args.engine_url):
        parser.error("--bundled-engine compares with the engine this starts: not with "
                     "--canned-upstream or --engine-url")
    engine_env = dict(item.split("=", 1) for item in args.engine_env)

    workdir = Path(tempfile.mkdtemp(prefix="headstart-bench-"))
    servers: list[ServerProcess] = []
    try:
        if args.engine_url:
            engine_url = args.engine_url.rstrip("/")
        elif args.canned_upstream is not None:
            port = free_port()
            servers.append(ServerProcess(
                [sys.executable, "-m", "bench.experiments.canned_upstream", "--port", str(port),
                 "--delay-ms", str(args.canned_upstream)], port).start())
            engine_url = servers[-1].base_url
        else:
            port = free_port()
            servers.append(ServerProcess(headstart_cmd("engine", "--port", str(port)),
                                         port, env=engine_env).start())
            engine_url = servers[-1].base_url
        paths: dict[str, tuple[str, int | None]] = {"direct": (engine_url, None)}
        servers.append(start_headstart(engine_url, workdir, args.workers))
        paths["headstart"] = (servers[-1].base_url, servers[-1].proc.pid)
        if args.bundled_engine:
            servers.append(start_headstart(None, workdir, env=engine_env))  # as the engine's
            paths["headstart-bundled"] = (servers[-1].base_url, None)  # its CPU: the engine's too
        if args.nginx:
            servers.append(start_nginx(args.nginx, engine_url, workdir))
            paths["nginx"] = (servers[-1].base_url, servers[-1].proc.pid)
        if args.litellm_proxy:
            servers.append(start_litellm_proxy(args.litellm_proxy, engine_url, workdir))
            paths["litellm-proxy"] = (servers[-1].base_url, servers[-1].proc.pid)
        results = {mode: measure(paths, args.requests, mode) for mode in MODES}
    finally:
        for server in reversed(servers):
            server.stop()
    if args.canned_upstream is not None:
        print(f"upstream: bench/experiments/canned_upstream.py, {args.canned_upstream:g} ms per answer")
    elif engine_env:
        print("engine environment: " + " ".join(f"{k}={v}" for k, v in engine_env.items()))
    print(table(results))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gateway_overhead.json").write_text(
            json.dumps({"engine_env": engine_env, "canned_upstream_ms": args.canned_upstream,
                        **results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
