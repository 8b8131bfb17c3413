"""Open-loop load generator: Poisson request arrivals from a seed, streaming requests.

Requests arrive at Poisson times whatever the server does (open loop), so a slow server
builds a queue instead of slowing the offered load. Each arrival continues a conversation
whose previous answer is back and whose think time is over, or starts a new one
(`bench/harness/session_pool.py`). Every request streams
through the official `openai` SDK; the record keeps TTFT (first content token), the gaps
between content chunks, end-to-end time, the `x-cache` header and the `usage` counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from openai import AsyncOpenAI
from tqdm import tqdm

from bench.harness.session_pool import ActiveSession, SessionPool
from bench.harness.stats import RequestRecord, RunSummary, summarize
from bench.harness.workloads import Session, WorkloadSizes, build_sessions


@dataclass
class LoadConfig:
    """One run: a workload at a request rate against one OpenAI-compatible base URL."""

    base_url: str
    model: str
    workload: str = "chat"
    rate: float = 1.0  # requests per second, averaged over sessions' turns
    duration_s: float = 30.0  # measured window, after the warm-up
    warmup_s: float = 5.0  # requests sent earlier are excluded from the statistics
    seed: int = 0
    pool_seed: int | None = None  # the workload's shared content (default: seed)
    concurrency: int | None = None  # cap on requests in flight (None: no cap)
    api_key: str = "none"
    sizes: WorkloadSizes = field(default_factory=WorkloadSizes)
    request_timeout_s: float = 120.0
    drain_timeout_s: float = 60.0  # how long to wait for stragglers after the window
    progress: bool = True


def poisson_arrivals(rate: float, horizon_s: float, seed: int) -> list[float]:
    """Arrival times in [0, horizon_s) of a Poisson process with `rate` per second."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    times, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon_s:
            return times
        times.append(t)


def normalize_base_url(url: str) -> str:
    """Accept `http://host:port` or `.../v1`; the SDK wants the `/v1` root."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def plan(config: LoadConfig) -> tuple[list[float], list[Session]]:
    """The request arrival times and enough sessions for them, both fixed by the seed."""
    arrivals = poisson_arrivals(config.rate, config.warmup_s + config.duration_s, config.seed)
    sessions = build_sessions(config.workload, len(arrivals), config.seed, config.sizes,
                              pool_seed=config.pool_seed)
    return arrivals, sessions


async def stream_request(client: AsyncOpenAI, model: str, messages: list[dict],
                         max_tokens: int, temperature: float, record: RequestRecord,
                         headers: dict[str, str]) -> str:
    """Send one streaming chat request, fill `record`, return the answer text."""
    started = time.perf_counter()
    pieces: list[str] = []
    last = None
    chunks = 0
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=messages, stream=True, max_tokens=max_tokens,
            temperature=temperature, stream_options={"include_usage": True},
            extra_headers=headers)
        record.cache = raw.headers.get("x-cache", "none")
        stream = raw.parse()
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                record.prompt_tokens = chunk.usage.prompt_tokens or 0
                record.completion_tokens = chunk.usage.completion_tokens or 0
                details = chunk.usage.prompt_tokens_details
                record.cached_tokens = (details.cached_tokens or 0) if details else 0
            text = "".join(c.delta.content or "" for c in chunk.choices if c.delta)
            if not text:
                continue
            if last is None:
                record.ttft_s = now - started
            else:
                record.itl_s.append(now - last)
            last = now
            chunks += 1
            pieces.append(text)
        record.e2e_s = time.perf_counter() - started
        if record.completion_tokens == 0:
            record.completion_tokens = chunks
    except asyncio.CancelledError:
        record.unfinished = True
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is a data point
        record.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    return "".join(pieces)


async def run_load(config: LoadConfig, *, client: AsyncOpenAI | None = None) -> list[RequestRecord]:
    """Run the workload open-loop and return one record per request sent."""
    arrivals, sessions = plan(config)
    horizon = config.warmup_s + config.duration_s
    own_client = client is None
    client = client or AsyncOpenAI(base_url=normalize_base_url(config.base_url),
                                   api_key=config.api_key, max_retries=0,
                                   timeout=config.request_timeout_s)
    max_tokens = config.sizes.max_tokens_for(config.workload)
    limit = asyncio.Semaphore(config.concurrency) if config.concurrency else None
    pool = SessionPool(sessions)
    records: list[RequestRecord] = []
    bar = tqdm(total=len(arrivals), unit="req", leave=False,
               desc=f"{config.workload} @ {config.rate:g}/s", disable=not config.progress)
    t0 = time.perf_counter()

    async def send(active: ActiveSession, record: RequestRecord, messages: list[dict]) -> None:
        request = stream_request(client, config.model, messages, max_tokens,
                                 config.sizes.temperature, record, active.headers)
        if limit:
            async with limit:
                answer = await request
        else:
            answer = await request
        bar.update(1)
        if record.error is None:
            active.finish_turn(answer)
        pool.release(active, time.perf_counter() - t0, ok=record.error is None)

    tasks = []
    try:
        for at in arrivals:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            active = pool.take(time.perf_counter() - t0)
            if active is None:
                break
            turn, messages = active.start_turn()
            record = RequestRecord(session_id=active.session.id, turn=turn, sent_s=at,
                                   warmup=at < config.warmup_s)
            records.append(record)
            tasks.append(asyncio.create_task(send(active, record, messages)))
        if tasks:
            left = horizon + config.drain_timeout_s - (time.perf_counter() - t0)
            _, pending = await asyncio.wait(tasks, timeout=max(left, 1.0))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        bar.close()
        if own_client:
            await client.close()
    return records


async def first_model(base_url: str, api_key: str = "none") -> str:
    """The first model a server lists, for runs without `--model`."""
    async with AsyncOpenAI(base_url=normalize_base_url(base_url), api_key=api_key,
                           max_retries=0, timeout=10) as client:
        page = await client.models.list()
        if not page.data:
            raise RuntimeError(f"{base_url} lists no models; pass --model")
        return page.data[0].id


async def measure(config: LoadConfig, *, target: str, slo_ms: float) -> RunSummary:
    """One run, summarised over its measured window."""
    records = await run_load(config)
    return summarize(records, target=target, workload=config.workload, rate=config.rate,
                     duration_s=config.duration_s, slo_ms=slo_ms)


def rate_runner(base: LoadConfig, *, target: str, slo_ms: float,
                min_requests: int = 20) -> Callable[[float], Awaitable[RunSummary]]:
    """`run_at(rate)` for sweeps: each rate gets its own traffic seed (new users and
    questions) over one shared pool (apps, documents, FAQ), the same for every target, and
    a window long enough for about `min_requests` measured requests (at most 60 s)."""

    async def run_at(rate: float) -> RunSummary:
        config = dataclasses.replace(base, rate=rate, seed=base.seed * 100_003 + round(rate * 1000),
                                     duration_s=max(base.duration_s, min(min_requests / rate, 60.0)),
                                     pool_seed=base.seed if base.pool_seed is None else base.pool_seed)
        summary = await measure(config, target=target, slo_ms=slo_ms)
        print(f"[bench] {target} {base.workload} @ {rate:g}/s: {summary.requests} reqs, "
              f"{summary.errors} errors, {summary.unfinished} unfinished, p95 TTFT {summary.ttft_ms['p95']} ms, "
              f"goodput {100 * summary.goodput:.0f}%", file=sys.stderr, flush=True)
        return summary

    return run_at
