"""Gateways with the Redis store: Redis killed mid-run, and two gateways sharing one Redis."""

from __future__ import annotations

import time

import openai

from tests.gateway.conftest import GatewayThread
from tests.gateway.test_cache_gateway import cache_config, chat


def client_for(server: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


def test_redis_killed_mid_run_then_back(engine_server, fresh_redis):
    server = GatewayThread(cache_config(engine_server.base_url, fresh_redis.url)).start()
    try:
        client = client_for(server)
        q = "What is the largest planet in the solar system?"
        chat(client, q)
        assert chat(client, q)[0]["x-cache"] == "exact"
        fresh_redis.stop()
        h, answer = chat(client, q)  # answered from the upstream, as a miss
        assert h["x-cache"] == "miss" and answer.choices[0].message.content
        fresh_redis.start()  # same port, empty
        time.sleep(1.0)  # past the store's back-off
        assert chat(client, q)[0]["x-cache"] == "miss"  # the new Redis holds nothing
        # stored again and served: a slow first call to the new server (a loaded machine)
        # may cost one more back-off, so recovery is given a few seconds, not one request
        seen = [chat(client, q)[0]["x-cache"]]
        deadline = time.monotonic() + 10
        while seen[-1] != "exact" and time.monotonic() < deadline:
            time.sleep(0.3)
            seen.append(chat(client, q)[0]["x-cache"])
        assert seen[-1] == "exact", seen
    finally:
        server.stop()


def test_two_gateways_share_one_redis(engine_server, redis_server):
    config = cache_config(engine_server.base_url, redis_server.url)
    a = GatewayThread(config).start()
    b = GatewayThread(config).start()
    try:
        q = "What is the chemical symbol for gold?"
        assert chat(client_for(a), q)[0]["x-cache"] == "miss"
        assert chat(client_for(b), q)[0]["x-cache"] == "exact"
        deadline = time.monotonic() + 5
        status = None
        while time.monotonic() < deadline and status != "semantic":
            # no-store: a probe that misses before b's index syncs must not become an entry
            status = chat(client_for(b), "what is the chemical symbol for gold",
                          headers={"Cache-Control": "no-store"})[0]["x-cache"]
            time.sleep(0.2)
        assert status == "semantic"
    finally:
        a.stop()
        b.stop()
