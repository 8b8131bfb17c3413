"""Admission control: a burst the engine cannot serve in time gets some 429s with
Retry-After and no 5xx; the latency fit of remote upstreams; cache hits never shed.
(How well the admitted requests keep the SLO is measured by `python -m bench.experiments.overload`.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.admission import Admission, LatencyFit
from gateway.config import GatewayConfig
from gateway.context import RequestContext
from openai_api import APIError, ChatCompletionRequest
from tests.gateway.conftest import scrape

BURST = 48


def burst_config(max_queue_s: float | None) -> dict:
    return {"limits": {"max_queue_s": max_queue_s} if max_queue_s else {},
            "upstreams": {"local": {"kind": "engine", "engine": {"kv_cache_memory_mb": 128}}},
            "routes": [{"name": "local", "models": ["local"], "upstream": "local"},
                       {"name": "patient", "models": ["patient"], "upstream": "local",
                        "max_queue_s": 600}]}


async def one(client: httpx.AsyncClient, i: int, model: str = "local") -> tuple[int, dict, str]:
    body = {"model": model, "stream": True, "max_tokens": 48, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"Tell me a story about the number {i}."}]}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        text = (await r.aread()).decode()
        return r.status_code, dict(r.headers), text


async def burst(base_url: str, model: str = "local",
                size: int = BURST) -> list[tuple[int, dict, str]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=300,
                                 limits=httpx.Limits(max_connections=size)) as client:
        return await asyncio.gather(*(one(client, i, model) for i in range(size)))


async def test_a_burst_is_partly_shed_with_retry_after_and_no_5xx(start_gateway):
    base = start_gateway(burst_config(1.0))
    answers = await burst(base)
    statuses = [status for status, _, _ in answers]
    shed = [(headers, text) for status, headers, text in answers if status == 429]
    assert set(statuses) <= {200, 429}
    assert 0 < len(shed) < BURST
    for headers, text in shed:
        assert int(headers["retry-after"]) >= 1
        assert '"code":"server_busy"' in text.replace(" ", "")
    for status, _, text in answers:
        if status == 200:
            assert text.rstrip().endswith("data: [DONE]")
    assert scrape(base, 'headstart_requests_shed_total{reason="queue",route="local"}') == \
        len(shed)
    # a route may allow longer queues: more than the engine's 16 slots, none shed there
    assert {status for status, _, _ in await burst(base, "patient", 24)} == {200}


def request_ctx(config: GatewayConfig, route: str = "remote") -> RequestContext:
    body = ChatCompletionRequest.model_validate(
        {"model": route, "messages": [{"role": "user", "content": "hi"}]})
    return RequestContext(request_id="r1", kind="chat", body=body, route=config.route(route))


def test_remote_upstreams_are_judged_by_latency_against_requests_in_flight():
    fit = LatencyFit()
    assert fit.predict(10) == 0.0  # nothing seen yet: admit
    for in_flight, seconds in [(0, 0.1), (10, 1.1)] * 5:
        fit.add(in_flight, seconds)
    assert fit.predict(20) == pytest.approx(2.1)
    assert fit.predict(0) == pytest.approx(0.1)
    assert fit.queueing_s(20) == pytest.approx(2.0) and fit.queueing_s(0) == 0.0
    flat = LatencyFit()
    for _ in range(3):
        flat.add(4, 0.5)
    assert flat.predict(40) == pytest.approx(0.5)  # one load seen: no slope to extrapolate


def test_a_remote_request_over_the_limit_gets_429_and_a_fallback_attempt_does_not():
    config = GatewayConfig.from_dict({
        "limits": {"max_queue_s": 1.0},
        "upstreams": {"a": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
                      "b": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "routes": [{"name": "remote", "models": ["remote"], "upstream": "a", "fallback": "b"}]})
    shed: list[tuple[str, str]] = []
    admission = Admission(config, None, lambda route, reason: shed.append((route, reason)))
    ctx = request_ctx(config)
    for in_flight, seconds in [(0, 0.2), (8, 1.0)] * 3:
        admission.loads["a"].fit.add(in_flight, seconds)
        admission.loads["b"].fit.add(in_flight, seconds)
    admission.loads["a"].by_priority[0] = admission.loads["b"].by_priority[0] = 8
    admission.check(ctx, "a")  # 8 ahead add 0.8 s to the 0.2 s of a request alone: admitted
    admission.loads["a"].by_priority[0] = admission.loads["b"].by_priority[0] = 20
    with pytest.raises(APIError) as err:
        admission.check(ctx, "a")  # 20 ahead add 2.0 s
    assert err.value.status == 429 and err.value.headers["retry-after"] == "1"
    assert err.value.body()["error"]["code"] == "server_busy"
    assert shed == [("remote", "queue")]
    admission.check(ctx, "b")  # the fallback is tried whatever its queue
