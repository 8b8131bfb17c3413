"""A replica killed mid-run, and started again: what clients see and how fast the gateway
notices.

Chat traffic at a steady rate through a gateway (`balance: prefix`) in front of three
replicas. At `kill_at_s` one replica gets SIGKILL; at `restart_at_s` it is started again
(loading takes a while). Every request records the replica that answered
(`x-headstart-endpoint`), whether a token came, and any error; the gateway's
`headstart_endpoint_*` metrics are scraped every 0.1 s for the victim's health, picks and
retries. The issue's bar: no request that had not received a token fails (the gateway moves
it to a survivor), new requests stop reaching the victim within 2 s, and it is used again
once back.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

import httpx
from openai import AsyncOpenAI

from bench.fleet.replicas import (
    MODEL,
    LiveSettings,
    gateway_config,
    start_gateway,
    start_replicas,
    stop_replicas,
)
from bench.harness.loadgen import poisson_arrivals
from bench.harness.session_pool import SessionPool
from bench.harness.workloads import build_sessions


@dataclass
class Sent:
    at_s: float
    endpoint: str | None = None
    got_token: bool = False
    error: str | None = None


def _sample(text: str, name: str, endpoint: str, extra: str = "") -> float:
    """The sum of `headstart_endpoint_<name>` samples for `endpoint` whose labels include
    `extra` (e.g. `outcome="retried"`)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(f"headstart_endpoint_{name}{{") and f'endpoint="{endpoint}"' in line \
                and extra in line:
            total += float(line.split()[-1])
    return total


async def kill_run(settings: LiveSettings, rate: float, kill_at_s: float = 20.0,
                   restart_at_s: float = 35.0, after_back_s: float = 40.0) -> dict:
    fleet = start_replicas(settings.replicas, list(settings.engine_args))
    victim = fleet[0]
    gateway = start_gateway(gateway_config(fleet, "prefix"))
    client = AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key="none", max_retries=0,
                         timeout=120)
    timeline: list[tuple[float, float, float, float]] = []  # t, healthy, picks, retried
    sent: list[Sent] = []
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    try:
        async def watch() -> None:
            async with httpx.AsyncClient() as http:
                while True:
                    text = (await http.get(gateway.base_url + "/metrics")).text
                    timeline.append((time.perf_counter() - t0,
                                     _sample(text, "healthy", victim.url),
                                     _sample(text, "picks_total", victim.url),
                                     _sample(text, "requests_total", victim.url,
                                             'outcome="retried"')))
                    await asyncio.sleep(0.1)

        async def one(messages: list[dict], record: Sent, active, pool: SessionPool) -> None:
            pieces = []
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=messages, stream=True, temperature=0,
                    max_tokens=settings.sizes.max_tokens_for("chat"),
                    extra_headers=active.headers)
                record.endpoint = raw.headers.get("x-headstart-endpoint")
                async for chunk in raw.parse():
                    if chunk.choices and chunk.choices[0].delta.content:
                        record.got_token = True
                        pieces.append(chunk.choices[0].delta.content)
                active.finish_turn("".join(pieces))
            except Exception as exc:  # noqa: BLE001 - every failure is a data point
                record.error = f"{type(exc).__name__}: {str(exc)[:160]}"
            pool.release(active, time.perf_counter() - t0, ok=record.error is None)

        async def life() -> None:
            await asyncio.sleep(kill_at_s)
            victim.kill()
            marks["killed"] = time.perf_counter() - t0
            await asyncio.sleep(max(0.0, restart_at_s - kill_at_s))
            await asyncio.to_thread(victim.start)
            marks["back"] = time.perf_counter() - t0

        horizon = restart_at_s + 240.0
        arrivals = poisson_arrivals(rate, horizon, settings.seed + 17)
        pool = SessionPool(build_sessions("chat", len(arrivals), settings.seed + 17,
                                          settings.sizes, pool_seed=settings.seed))
        watcher = asyncio.create_task(watch())
        lifecycle = asyncio.create_task(life())
        tasks = []
        for at in arrivals:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            if "back" in marks and time.perf_counter() - t0 > marks["back"] + after_back_s:
                break
            active = pool.take(time.perf_counter() - t0)
            if active is None:
                break
            _, messages = active.start_turn()
            record = Sent(at)
            sent.append(record)
            tasks.append(asyncio.create_task(one(messages, record, active, pool)))
        await asyncio.gather(*tasks)
        await lifecycle
        watcher.cancel()
    finally:
        await client.close()
        gateway.stop()
        stop_replicas(fleet)
    return summarize(sent, timeline, marks, victim.url)


def summarize(sent: list[Sent], timeline: list[tuple[float, float, float, float]],
              marks: dict[str, float], victim: str) -> dict:
    killed, back = marks.get("killed", 0.0), marks.get("back", 0.0)
    down = [t for t, healthy, _, _ in timeline if t >= killed and healthy == 0]
    up_again = [t for t, healthy, _, _ in timeline if t >= back and healthy == 1]
    picks_before = [p for t, _, p, _ in timeline if t <= (up_again[0] if up_again else back)]
    last_growth = killed  # the last moment the victim still got picks while down
    for (t1, _, p1, _), (_, _, p0, _) in zip(timeline[1:], timeline, strict=False):
        if killed <= t1 <= (up_again[0] if up_again else back) and p1 > p0:
            last_growth = t1
    return {
        "requests": len(sent),
        "failed_before_a_token": sum(1 for s in sent if s.error and not s.got_token),
        "cut_mid_stream": sum(1 for s in sent if s.error and s.got_token),
        "errors_sample": sorted({s.error for s in sent if s.error})[:3],
        "killed_at_s": round(killed, 2), "back_at_s": round(back, 2),
        "ejected_after_s": round(down[0] - killed, 2) if down else None,
        "victim_picked_until_s_after_kill": round(last_growth - killed, 2),
        "readmitted_after_s": round(up_again[0] - back, 2) if up_again else None,
        "victim_answers_after_back": sum(1 for s in sent if s.endpoint == victim
                                         and up_again and s.at_s >= up_again[0]),
        "victim_picks_total_before_back": picks_before[-1] if picks_before else 0,
        "timeline": timeline[::5],
        "sent": [asdict(s) for s in sent],
    }
