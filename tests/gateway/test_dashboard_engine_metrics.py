"""The embedded default (`make serve`: gateway and engine in one process) exports the
engine's own series on the gateway's `/metrics`, under exactly the names `headstart engine`
serves, with the values the engine itself holds."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from gateway.config import default_config
from tests.gateway.conftest import GatewayThread, scrape

SYSTEM = "You are a careful assistant who answers in one short sentence. " * 8


@pytest.fixture(scope="module")
def embedded():
    config = default_config()  # what `make serve` runs, with a smaller KV pool for the suite
    config.upstreams["local"].engine = {"kv_cache_memory_mb": 128}
    server = GatewayThread(config).start()
    yield server
    server.stop()


def engine_families(base_url: str) -> set[tuple[str, str]]:
    """(name, type) of every `headstart_engine_*` family in a /metrics text, but the
    `_created` stamps, which a labelled counter shows only once it has a child."""
    text = httpx.get(base_url + "/metrics").text
    return {(name, kind) for name, kind in re.findall(
        r"^# TYPE (headstart_engine_\w+) (\w+)$", text, re.M) if not name.endswith("_created")}


def test_the_gateway_exports_the_engine_servers_names(embedded, engine_server):
    ours = engine_families(embedded.base_url)
    assert ours == engine_families(engine_server.base_url)
    for name in ("kv_blocks_used", "kv_blocks_total", "kv_blocks_cached",
                 "num_requests_running", "num_requests_waiting"):
        assert (f"headstart_engine_{name}", "gauge") in ours
    for name in ("prefix_hit_tokens", "prompt_tokens", "preemptions"):
        assert (f"headstart_engine_{name}_total", "counter") in ours
    for name in ("time_to_first_token_seconds", "queue_time_seconds"):
        assert (f"headstart_engine_{name}", "histogram") in ours


def test_values_are_the_engines_own(embedded):
    base = embedded.base_url
    stats = embedded.app.state.engine.stats()
    assert scrape(base, "headstart_engine_kv_blocks_total") == stats.kv_blocks_total > 0
    before = {name: scrape(base, f"headstart_engine_{name}", 0.0) for name in (
        "time_to_first_token_seconds_count", "queue_time_seconds_count",
        "prompt_tokens_total", "prefix_hit_tokens_total")}
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    usages = []
    for _ in range(2):  # the same long system prompt twice: the second reads it from cache
        answer = client.chat.completions.create(
            model="smollm2-135m-instruct", max_tokens=4,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}])
        usages.append(answer.usage)
    after = {name: scrape(base, f"headstart_engine_{name}") for name in before}
    assert after["time_to_first_token_seconds_count"] - before[
        "time_to_first_token_seconds_count"] == 2
    assert after["queue_time_seconds_count"] - before["queue_time_seconds_count"] == 2
    assert after["prompt_tokens_total"] - before["prompt_tokens_total"] == sum(
        u.prompt_tokens for u in usages)
    hits = sum(u.prompt_tokens_details.cached_tokens for u in usages)
    assert hits >= 64  # the system prompt's full blocks
    assert after["prefix_hit_tokens_total"] - before["prefix_hit_tokens_total"] == hits
    assert scrape(base, 'headstart_engine_requests_total{endpoint="chat",finish_reason="length"}'
                  ) >= 2
    assert scrape(base, "headstart_engine_kv_blocks_used") == 0  # both finished: blocks free
