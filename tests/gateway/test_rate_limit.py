"""Per-key and per-tenant limits (`rpm`, `tpm`): the bucket arithmetic on a fake clock, then
real gateways in front of a `headstart engine`, counting in memory and in a real Redis
shared by two gateways, with Redis killed under them (fail open)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from websockets.sync.client import connect

from gateway.rate_buckets import Bucket, MemoryBuckets
from gateway.rate_limit import duration
from tests.gateway.conftest import GatewayThread, scrape

ASK = {"model": "remote", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(engine_url: str, keys: list[dict], tenants: dict | None = None, **extra) -> dict:
    return {"auth": {"keys": keys, "tenants": tenants or {}}, **extra,
            "upstreams": {"remote": {"kind": "openai", "base_url": engine_url + "/v1",
                                     "model": "smollm2-135m-instruct"}},
            "routes": [{"name": "remote", "models": ["remote"], "upstream": "remote"}]}


def post(base_url: str, key: str, body: dict = ASK) -> httpx.Response:
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"authorization": f"Bearer {key}"})


async def test_a_bucket_allows_its_limit_at_once_then_refills_one_interval_at_a_time():
    clock = FakeClock()
    buckets = MemoryBuckets(clock)
    rpm5 = Bucket("k:a:rpm", "requests", 5)  # one request every 12 s
    for i in range(5):
        ok, [level] = await buckets.take([(rpm5, 1)])
        assert ok and level.after == pytest.approx(12.0 * (i + 1))
    ok, [level] = await buckets.take([(rpm5, 1)])
    assert not ok and level.before == pytest.approx(60.0) and level.after == pytest.approx(72.0)
    clock.now += 12.0  # one interval later, exactly one more fits
    assert (await buckets.take([(rpm5, 1)]))[0]
    assert not (await buckets.take([(rpm5, 1)]))[0]


async def test_a_refused_take_charges_no_bucket_and_settling_gives_tokens_back():
    clock = FakeClock()
    buckets = MemoryBuckets(clock)
    rpm = Bucket("k:a:rpm", "requests", 60)
    tpm = Bucket("k:a:tpm", "tokens", 600)  # 0.1 s per token
    assert (await buckets.take([(rpm, 1), (tpm, 500)]))[0]
    ok, levels = await buckets.take([(rpm, 1), (tpm, 200)])  # 700 tokens: over
    assert not ok and levels[0].before == pytest.approx(1.0)
    assert buckets.tats["k:a:rpm"] == pytest.approx(clock.now + 1.0)  # not charged
    await buckets.settle([(tpm, -400)])  # the answer used 100 tokens, not 500
    assert buckets.tats["k:a:tpm"] == pytest.approx(clock.now + 10.0)
    assert (await buckets.take([(rpm, 1), (tpm, 200)]))[0]


def test_durations_use_openais_format():
    assert [duration(s) for s in (0.02, 0.9999, 1.0, 7.2, 60.0, 360.0)] == \
        ["20ms", "1000ms", "1s", "8s", "1m0s", "6m0s"]


def test_the_sixth_request_in_a_minute_gets_429_with_the_ratelimit_headers(start_gateway,
                                                                          engine_server):
    base = start_gateway(config(engine_server.base_url, [{"key": "k5", "tenant": "t",
                                                          "rpm": 5}]))
    answers = [post(base, "k5") for _ in range(5)]
    assert [r.status_code for r in answers] == [200] * 5
    assert [r.headers["x-ratelimit-remaining-requests"] for r in answers] == \
        ["4", "3", "2", "1", "0"]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "5"
    sixth = post(base, "k5")
    assert sixth.status_code == 429
    error = sixth.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert sixth.headers["x-ratelimit-limit-requests"] == "5"
    assert sixth.headers["x-ratelimit-remaining-requests"] == "0"
    reset = sixth.headers["x-ratelimit-reset-requests"]  # a minute less the time taken
    assert reset == "1m0s" or (reset.endswith("s") and 40 <= int(reset[:-1]) <= 59)
    assert 1 <= int(sixth.headers["retry-after"]) <= 12  # one request's interval at most
    assert "x-request-id" in sixth.headers
    assert scrape(base, 'headstart_requests_shed_total{reason="rpm",route="remote"}') == 1.0


def test_a_tenant_limit_is_shared_by_its_keys_and_tokens_are_limited_too(start_gateway,
                                                                         engine_server):
    keys = [{"key": "ka", "tenant": "team"}, {"key": "kb", "tenant": "team", "tpm": 1000}]
    base = start_gateway(config(engine_server.base_url, keys,
                                tenants={"team": {"rpm": 3}}))
    assert [post(base, k).status_code for k in ("ka", "kb", "ka")] == [200, 200, 200]
    refused = post(base, "kb")
    assert refused.status_code == 429 and "tenant" in refused.json()["error"]["message"]
    big = {**ASK, "max_tokens": 2000}  # over kb's tokens per minute on its own
    too_big = post(start_gateway(config(engine_server.base_url, keys)), "kb", big)
    assert too_big.status_code == 429
    assert too_big.headers["x-ratelimit-limit-tokens"] == "1000"
    assert "Request too large" in too_big.json()["error"]["message"]


def test_two_gateways_share_the_limit_in_redis_which_holds_no_raw_key(engine_server,
                                                                      redis_server):
    import redis

    cfg = config(engine_server.base_url, [{"key": "secret-key-xyz", "tenant": "t", "rpm": 4}],
                 redis=redis_server.url)
    a, b = GatewayThread(cfg).start(), GatewayThread(cfg).start()
    try:
        codes = [post(g.base_url, "secret-key-xyz").status_code for g in (a, b, a, b, a)]
        assert codes == [200, 200, 200, 200, 429]
        store = redis.Redis.from_url(redis_server.url)
        names = [k.decode() for k in store.keys("*rl:*")]
        assert names and all("secret-key-xyz" not in n for n in names)
        assert all(b"secret-key-xyz" not in (store.get(n) or b"") for n in names)
    finally:
        a.stop()
        b.stop()


def test_redis_down_fails_open_logs_once_and_counts(engine_server, fresh_redis, caplog):
    cfg = config(engine_server.base_url, [{"key": "k1", "tenant": "t", "rpm": 1}],
                 redis=fresh_redis.url)
    server = GatewayThread(cfg).start()
    try:
        assert post(server.base_url, "k1").status_code == 200
        assert post(server.base_url, "k1").status_code == 429
        fresh_redis.stop()
        with caplog.at_level(logging.WARNING, logger="headstart.gateway"):
            codes = [post(server.base_url, "k1").status_code for _ in range(3)]
        assert codes == [200, 200, 200]  # unlimited while Redis is away
        outage_lines = [r for r in caplog.records if "rate limits: redis unavailable" in
                        r.getMessage()]
        assert len(outage_lines) == 1
        assert scrape(server.base_url, "headstart_ratelimit_store_errors_total") >= 3
    finally:
        server.stop()


def test_a_limited_websocket_request_gets_an_error_message_with_retry_after(start_gateway,
                                                                           engine_server):
    base = start_gateway(config(engine_server.base_url, [{"key": "kw", "tenant": "t",
                                                          "rpm": 1}]))
    url = base.replace("http", "ws") + "/v1/ws?api_key=kw"
    with connect(url) as ws:
        assert json.loads(ws.recv())["type"] == "session"
        ws.send(json.dumps(ASK))
        while (message := json.loads(ws.recv())).get("type") != "done":
            assert message.get("type") != "error", message
        assert message["headers"]["x-ratelimit-remaining-requests"] == "0"
        ws.send(json.dumps(ASK))
        refused = json.loads(ws.recv())
        assert refused["type"] == "error" and refused["error"]["code"] == "rate_limit_exceeded"
        assert int(refused["headers"]["retry-after"]) >= 59
