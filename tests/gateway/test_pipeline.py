"""The request path's failure handling, for real: a dead upstream (503 naming it), fallback,
per-route timeouts (504), and a client leaving mid-stream aborting the engine's request."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.gateway.conftest import engine_gauge, scrape, wait_until

MSGS = [{"role": "user", "content": "Tell me a long story about a lighthouse."}]


@pytest.mark.parametrize("stream", [False, True])
def test_dead_upstream_is_503_naming_it(client, stream):
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="down", messages=MSGS, max_tokens=2, stream=stream)
    assert info.value.status_code == 503
    assert "upstream 'dead'" in info.value.message
    assert info.value.body["type"] == "service_unavailable"


def test_fallback_answers_when_upstream_is_down(client):
    raw = client.chat.completions.with_raw_response.create(model="fallback", messages=MSGS,
                                                           max_tokens=3)
    assert raw.headers["x-headstart-upstream"] == "remote"
    assert raw.parse().choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_stalled_upstream_times_out_with_504(client, stream):
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="slow", messages=MSGS, max_tokens=2, stream=stream)
    assert info.value.status_code == 504
    assert "upstream 'stalled'" in info.value.message
    assert time.monotonic() - t0 < 30  # bounded by the route's timeout, not the client's


def test_timeout_falls_back(client, gateway):
    raw = client.chat.completions.with_raw_response.create(model="slow-fallback",
                                                           messages=MSGS, max_tokens=3)
    assert raw.headers["x-headstart-upstream"] == "local"
    metrics = httpx.get(gateway.base_url + "/metrics").text
    assert 'headstart_gateway_fallbacks_total{route="slow-fallback",upstream="local"}' in metrics


@pytest.mark.parametrize("n", [1, 3])
def test_client_disconnect_frees_engine_blocks(gateway, n):
    engine = gateway.app.state.engine
    body = {"model": "smollm2-135m-instruct", "messages": MSGS, "max_tokens": 400,
            "ignore_eos": True, "stream": True, "n": n}
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=body,
                      timeout=60) as r:
        assert r.status_code == 200
        seen = 0
        for line in r.iter_lines():  # leaving this loop closes the connection
            if line.startswith("data: {"):
                seen += 1
                if seen == 3:
                    stats = engine.stats()
                    assert stats.num_running == n and stats.kv_blocks_used > 0
                    break
    # the connection is closed: the gateway must abort the engine's request
    assert wait_until(lambda: engine.stats().num_running == 0), engine.stats()
    assert engine.stats().kv_blocks_used == 0


def test_mid_stream_error_becomes_an_error_frame(gateway):
    # a total timeout that expires after the first chunk (the status is already 200) and
    # long before 2,000 tokens; the exact timing is pinned in test_pipeline_timeouts.py
    from gateway.config import GatewayConfig
    from tests.gateway.conftest import GatewayThread

    config = GatewayConfig.from_dict({
        "upstreams": {"remote": gateway.app.state.config.upstreams["remote"].model_dump()},
        "routes": [{"name": "r", "models": ["m"], "upstream": "remote", "timeout_s": 30,
                    "total_timeout_s": 2.0}],
    })
    short = GatewayThread(config).start()
    try:
        body = {"model": "m", "messages": MSGS, "max_tokens": 2000, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", short.base_url + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            frames = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert frames[-1] != "[DONE]"
        assert json.loads(frames[-1])["error"]["type"] == "timeout_error"
    finally:
        short.stop()


@pytest.mark.parametrize("n", [1, 3])
def test_client_disconnect_aborts_remote_upstream(gateway, engine_server, n):
    body = {"model": "remote", "messages": MSGS, "max_tokens": 400, "ignore_eos": True,
            "stream": True, "n": n}
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=body,
                      timeout=60) as r:
        for line in r.iter_lines():  # leaving this loop closes the connection
            if line.startswith("data: {"):
                assert engine_gauge(engine_server, "num_requests_running") == n
                break
    assert wait_until(lambda: engine_gauge(engine_server, "num_requests_running") == 0)
    assert engine_gauge(engine_server, "kv_blocks_used") == 0


def engine_aborts(engine_server) -> float:
    return scrape(engine_server.base_url,
                  'headstart_engine_requests_total{endpoint="chat",finish_reason="abort"}', 0.0)


def test_non_streaming_client_leaving_aborts_remote_upstream(gateway, engine_server):
    # asked upstream unstreamed: closing the connection is the only sign the client left
    before = engine_aborts(engine_server)
    body = {"model": "remote", "messages": MSGS, "max_tokens": 2000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.base_url + "/v1/chat/completions", json=body,
                   timeout=httpx.Timeout(10, read=2))
    assert wait_until(lambda: engine_aborts(engine_server) == before + 1, timeout_s=15)
    assert wait_until(lambda: engine_gauge(engine_server, "num_requests_running") == 0)
    assert engine_gauge(engine_server, "kv_blocks_used") == 0


def test_non_streaming_client_leaving_aborts_the_engine(gateway):
    engine = gateway.app.state.engine
    body = {"model": "smollm2-135m-instruct", "messages": MSGS, "max_tokens": 2000,
            "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.base_url + "/v1/chat/completions", json=body,
                   timeout=httpx.Timeout(10, read=2))
    # 2,000 tokens take far longer than this wait: only an abort ends the request in time
    assert wait_until(lambda: engine.stats().num_running == 0, timeout_s=15), engine.stats()
    assert engine.stats().kv_blocks_used == 0


def whole_context(gateway, model: str, stream: bool = False):
    from gateway.context import RequestContext
    from openai_api import ChatCompletionRequest

    body = ChatCompletionRequest.model_validate({"model": model, "messages": MSGS,
                                                 "stream": stream})
    route = gateway.app.state.routes.resolve(model, None)
    return RequestContext(request_id="t", kind="chat", body=body, route=route)


def test_which_requests_are_answered_whole(gateway):
    pipeline = gateway.app.state.pipeline
    assert pipeline.answers_whole(whole_context(gateway, "remote"))
    assert pipeline.answers_whole(whole_context(gateway, "fallback"))  # dead, then remote
    assert not pipeline.answers_whole(whole_context(gateway, "remote", stream=True))
    assert not pipeline.answers_whole(whole_context(gateway, "always-stream"))
    assert not pipeline.answers_whole(whole_context(gateway, "slow-fallback"))  # then the engine
    assert not pipeline.answers_whole(whole_context(gateway, "smollm2-135m-instruct"))


def metric(gateway, sample: str) -> float:
    return scrape(gateway.base_url, sample, 0.0)


def test_a_whole_answer_is_accounted_like_a_streamed_one(client, gateway):
    names = ['headstart_gateway_requests_total{outcome="ok",route="fallback"}',
             'headstart_gateway_cache_lookups_total{route="fallback",status="bypass"}',
             'headstart_gateway_fallbacks_total{route="fallback",upstream="remote"}',
             'headstart_gateway_upstream_seconds_count{outcome="error",route="fallback",'
             'upstream="dead"}',
             'headstart_gateway_upstream_seconds_count{outcome="ok",route="fallback",'
             'upstream="remote"}',
             'headstart_gateway_ttft_seconds_count{cache="bypass",route="fallback"}']
    before = [metric(gateway, name) for name in names]
    tokens = metric(gateway, 'headstart_gateway_prompt_tokens_total{route="fallback"}')
    raw = client.chat.completions.with_raw_response.create(model="fallback", messages=MSGS,
                                                           max_tokens=2)
    answer = raw.parse()
    assert raw.headers["x-cache"] == "bypass" and "upstream;dur=" in raw.headers["server-timing"]
    assert answer.model == "fallback" and answer.usage.completion_tokens == 2
    assert [metric(gateway, name) - b for name, b in zip(names, before, strict=True)] == [1] * 6
    assert metric(gateway, 'headstart_gateway_prompt_tokens_total{route="fallback"}') \
        == tokens + answer.usage.prompt_tokens
