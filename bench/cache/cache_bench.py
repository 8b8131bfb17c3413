"""Cache speed through a real gateway with the Redis store, in one run.

    python -m bench.cache.cache_bench [--rate 200] [--duration 10] [--entries 20000] [--out DIR]
                                      [--workers N]

Starts Redis, a `headstart engine` and a `headstart serve` subprocess on free loopback
ports, then measures: miss TTFT with the time the miss spent in cache lookups (from
`Server-Timing`), into an empty cache and again once near neighbours are stored (so the
verifier reads candidates and turns them down); then, over entries preloaded through the
admin API (keyed like the requests), exact-hit latency at `--rate` req/s (open loop) and
semantic-hit latency, for repeats with fillers (no model call) and for rewordings the pair
verifier must read;
and the memory of `--entries` entries (local index + memory store, and Redis), scaled to
100k. Prints a table and writes `cache_bench.json` to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import yaml

from tests.support.processes import RedisProcess, ServerProcess, free_port, headstart_cmd

CITIES = ["Paris", "Rome", "Madrid", "Berlin", "Vienna"] * 8
QUESTIONS = [f"What is fact number {i} about the history of {city}?"
             for i, city in enumerate(CITIES)]
REWORDED = [f"Tell me fact {i} on {city}'s history, please." for i, city in enumerate(CITIES)]
NEAR_MISSES = [f"What is fact number {i} about the food of {city}?"
               for i, city in enumerate(CITIES)]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def stage_ms(header: str, name: str) -> float | None:
    for part in header.split(","):
        if part.strip().startswith(name + ";dur="):
            return float(part.split("=", 1)[1])
    return None


PARAMS = {"temperature": 0, "max_tokens": 16}


@dataclass
class LoadResponse:
    status_code: int
    headers: Mapping[str, str]
    content: bytes

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}: {self.content[:200]!r}")


class LoadClient:
    """The few calls this bench makes, over aiohttp: at 200 req/s an httpx client costs
    ~1.3 ms of CPU per request (aiohttp ~0.2 ms) on the same two cores as the gateway it
    measures, and its queueing would be counted as the gateway's latency."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                             timeout=aiohttp.ClientTimeout(total=60))

    async def post(self, path: str, json: Any = None, headers: dict | None = None
                   ) -> LoadResponse:
        async with self.session.post(self.base_url + path, json=json,
                                     headers=headers) as r:
            return LoadResponse(r.status, r.headers, await r.read())

    async def __aenter__(self) -> LoadClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()


async def ask(client: LoadClient, text: str, headers: dict | None = None) -> tuple:
    body = {"model": "faq", **PARAMS, "messages": [{"role": "user", "content": text}]}
    t0 = time.perf_counter()
    r = await client.post("/v1/chat/completions", json=body, headers=headers or {})
    return (time.perf_counter() - t0) * 1000, r


async def open_loop(client: LoadClient, texts: list[str], rate: float,
                    duration: float) -> list[tuple[float, str]]:
    """Requests started at a fixed rate whatever the latency; (ms, x-cache) per request."""
    results: list[tuple[float, str]] = []

    async def one(text: str) -> None:
        try:
            ms, r = await ask(client, text)
            results.append((ms, r.headers.get("x-cache", "?") if r.status_code == 200 else "error"))
        except (aiohttp.ClientError, TimeoutError):
            results.append((float("nan"), "error"))

    tasks, start, i = [], time.perf_counter(), 0
    while time.perf_counter() - start < duration:
        due = start + i / rate
        if due > time.perf_counter():
            await asyncio.sleep(due - time.perf_counter())
        tasks.append(asyncio.create_task(one(texts[i % len(texts)])))
        i += 1
    await asyncio.gather(*tasks)
    return results


def new_client(base_url: str) -> LoadClient:
    return LoadClient(base_url)


async def http_phase(base_url: str, rate: float, duration: float) -> dict:
    async with new_client(base_url) as client:
        miss_lookup, miss_ttft, miss_total = [], [], []
        for q in QUESTIONS[:6]:  # misses, answered by the engine
            ms, r = await ask(client, f"Briefly: {q}")
            timing = r.headers.get("server-timing", "")
            miss_total.append(ms)
            if (c := stage_ms(timing, "cache")) is not None:
                miss_lookup.append(c)
            if (u := stage_ms(timing, "upstream")) is not None:
                miss_ttft.append(u)
        for q in QUESTIONS:  # hit phases: curated entries keyed like the requests
            entry = {"route": "faq", "messages": [{"role": "user", "content": q}],
                     "response": f"Curated answer about {q} " * 8, "params": PARAMS}
            (await client.post("/admin/cache/entries", json=entry)).raise_for_status()
        near_lookup, near_status = [], []
        for q in NEAR_MISSES[:12]:  # misses with candidates for the verifier to read
            ms, r = await ask(client, q)
            near_status.append(r.headers.get("x-cache", "?"))
            if (c := stage_ms(r.headers.get("server-timing", ""), "cache")) is not None:
                near_lookup.append(c)
    await asyncio.sleep(0.5)
    async with new_client(base_url) as client:
        await open_loop(client, QUESTIONS, 50, 1.0)  # warm connections
        serial = [(await ask(client, q))[0] for q in QUESTIONS * 5]  # one in flight
        sem_serial = [(await ask(client, f"um {q.lower()}"))[0] for q in QUESTIONS]
        verified = [await ask(client, q) for q in REWORDED]
        verified_ms = [ms for ms, r in verified if r.headers.get("x-cache") == "semantic"]
        exact = await open_loop(client, QUESTIONS, rate, duration)
    async with new_client(base_url) as client:
        variants = [f"um {q.lower().rstrip('?')}" for q in QUESTIONS]
        semantic = await open_loop(client, variants, 20, min(duration, 5.0))
    exact_ms = [ms for ms, status in exact if status == "exact"]
    sem_ms = [ms for ms, status in semantic if status == "semantic"]
    return {
        "miss_cache_lookup_ms_p50": pct(miss_lookup, 50),
        "miss_cache_lookup_ms_p99": pct(miss_lookup, 99),
        "miss_upstream_ttft_ms_p50": pct(miss_ttft, 50),
        "miss_total_ms_p50": pct(miss_total, 50),
        "near_miss_cache_lookup_ms_p50": pct(near_lookup, 50),
        "near_miss_cache_lookup_ms_p99": pct(near_lookup, 99),
        "near_miss_served": sum(s == "semantic" for s in near_status),
        "verified_hit_ms_p50_serial": pct(verified_ms, 50),
        "verified_hits": len(verified_ms), "verified_asked": len(verified),
        "exact_hit_ms_p50_serial": pct(serial, 50), "exact_hit_ms_p99_serial": pct(serial, 99),
        "semantic_hit_ms_p50_serial": pct(sem_serial, 50),
        "exact_rate_rps": rate, "exact_requests": len(exact),
        "exact_errors": sum(1 for _, status in exact if status == "error"),
        "exact_hit_share": len(exact_ms) / max(1, len(exact)),
        "exact_hit_ms_p50": pct(exact_ms, 50), "exact_hit_ms_p99": pct(exact_ms, 99),
        "semantic_requests": len(semantic),
        "semantic_hit_share": len(sem_ms) / max(1, len(semantic)),
        "semantic_hit_ms_p50": pct(sem_ms, 50), "semantic_hit_ms_p99": pct(sem_ms, 99),
    }


async def memory_phase(redis_url: str, entries: int) -> dict:
    """Bytes per entry: local process (memory store + faiss index) and in Redis."""
    from cache.index import VectorIndex
    from cache.question import form_key
    from cache.stores.base import CacheEntry
    from cache.stores.memory import MemoryStore
    from cache.stores.redis_store import RedisStore

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((entries, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    answer = {"kind": "chat", "model": "m", "content": "x" * 400, "finish_reason": "stop",
              "tool_calls": None, "usage": {"prompt_tokens": 20, "completion_tokens": 90}}

    questions = [f"question number {i} about something" for i in range(entries)]
    forms = [form_key(q) for q in questions]  # worked out by the writer when it stores

    def make(i: int) -> CacheEntry:
        now = time.time()
        return CacheEntry(key=f"{i:064x}", route="faq", answer=dict(answer), created_at=now,
                          exact_expires_at=now + 3600, partition=f"p{i % 10}",
                          question=questions[i], vector=vecs[i], semantic_expires_at=now + 3600,
                          form=forms[i])

    tracemalloc.start()
    store, index = MemoryStore(), VectorIndex()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(entries):
        e = make(i)
        await store.put(e)
        index.add(sem_entry(e), e.vector)
    local = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()

    redis = await RedisStore.open(redis_url, prefix="membench:", timeout_s=5)
    before = int((await redis.client.info("memory"))["used_memory"])
    for start in range(0, entries, 50):
        await asyncio.gather(*(redis.put(make(i)) for i in range(start, min(entries, start + 50))))
    after = int((await redis.client.info("memory"))["used_memory"])
    await redis.close()
    scale = 100_000 / entries
    return {"entries_measured": entries,
            "local_mb_per_100k": local * scale / 2**20,
            "redis_mb_per_100k": (after - before) * scale / 2**20}


def sem_entry(e):
    from cache.index import IndexedEntry

    return IndexedEntry(e.key, e.partition, e.question, e.semantic_expires_at, e.form)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cache_bench", description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--workers", type=int, default=1, help="gateway processes (`--workers`)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    redis = RedisProcess().start()
    eport, gport = free_port(), free_port()
    engine = ServerProcess(headstart_cmd("engine", "--port", str(eport)), eport).start()
    config = {"redis": redis.url,
              "upstreams": {"remote": {"kind": "openai", "base_url": f"{engine.base_url}/v1",
                                       "model": "smollm2-135m-instruct"}},
              "routes": [{"name": "faq", "models": ["faq"], "upstream": "remote",
                          "cache": {"exact": {"enabled": True},
                                    "semantic": {"enabled": True}}}]}
    cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
    cfg.write_text(yaml.safe_dump(config))
    workers = ["--workers", str(args.workers)] if args.workers > 1 else []
    gateway = ServerProcess(headstart_cmd("serve", "--config", str(cfg), "--port", str(gport),
                                          *workers), gport)
    try:
        gateway.start()
        results = asyncio.run(http_phase(gateway.base_url, args.rate, args.duration))
        print(json.dumps(results), flush=True)
        results.update(asyncio.run(memory_phase(redis.url, args.entries)))
    finally:
        gateway.stop()
        engine.stop()
        redis.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache_bench.json").write_text(json.dumps(results, indent=2))
    for k, v in results.items():
        print(f"{k:<32} {v:.3f}" if isinstance(v, float) else f"{k:<32} {v}")
    print("median exact-hit vs miss latency ratio:",
          f"{results['exact_hit_ms_p50'] / max(1e-9, results['miss_total_ms_p50']):.4f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
