"""The caches through a live gateway, with the official `openai` SDK as the client:
x-cache / x-cache-similarity / Server-Timing, streamed replay, Cache-Control, namespaces,
tenants, and what is never stored (errors, aborts, `length` answers)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import GatewayThread, engine_gauge, wait_until
from tests.support.processes import free_port

ADMIN = "admin-secret"


def cache_config(engine_url: str, redis_url: str | None = None,
                 keys: list[dict] | None = None) -> dict:
    return {
        "redis": redis_url,
        "auth": {"admin_key": ADMIN, "keys": keys or []},
        "upstreams": {
            "remote": {"kind": "openai", "base_url": engine_url + "/v1",
                       "model": "smollm2-135m-instruct"},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"},
        },
        "routes": [
            {"name": "faq", "models": ["faq", "faq-*"], "upstream": "remote",
             "cache": {"exact": {"enabled": True, "ttl_s": 600},
                       "semantic": {"enabled": True, "threshold": 0.85, "max_temperature": 0.3}}},
            {"name": "down", "models": ["down"], "upstream": "dead",
             "cache": {"exact": {"enabled": True}}},
            {"name": "plain", "models": ["plain"], "upstream": "remote"},
        ],
    }


@pytest.fixture(scope="module")
def gw(engine_server):
    server = GatewayThread(cache_config(engine_server.base_url)).start()
    yield server
    server.stop()


@pytest.fixture
def client(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url + "/v1", api_key="x", max_retries=0)


def chat(client: openai.OpenAI, text: str, model: str = "faq", headers: dict | None = None,
         **kw):
    """(headers, completion) for one question at temperature 0."""
    kw.setdefault("max_tokens", 48)
    kw.setdefault("stop", [".", ",", "\n"])  # short answers that end in "stop"
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], temperature=0,
        extra_headers=headers or {}, **kw)
    return raw.headers, raw.parse()


def stats(gw) -> dict:
    r = httpx.get(gw.base_url + "/admin/cache/stats",
                  headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    return r.json()


def test_miss_then_exact_then_semantic(client):
    h1, first = chat(client, "What is the capital of France?")
    assert h1["x-cache"] == "miss" and "cache;dur=" in h1["server-timing"]
    assert first.choices[0].finish_reason == "stop"
    h2, second = chat(client, "What is the capital of France?")
    assert h2["x-cache"] == "exact" and "x-cache-similarity" not in h2
    assert second.choices[0].message.content == first.choices[0].message.content
    h3, third = chat(client, "um what is the capital of france")  # the same once normalised:
    assert h3["x-cache"] == "semantic" and "x-cache-similarity" not in h3  # found unembedded
    assert third.choices[0].message.content == first.choices[0].message.content
    h, _ = chat(client, "Tell me the capital of France.")  # the route sets its own cosine
    assert h["x-cache"] == "semantic" and float(h["x-cache-similarity"]) > 0.85  # floor
    h4, _ = chat(client, "What is the capital of Germany?")
    assert h4["x-cache"] == "miss"


def test_streamed_replay_comes_in_chunks(client):
    _, first = chat(client, "What is the capital of Italy?", max_tokens=64)
    assert first.choices[0].finish_reason == "stop"
    raw = client.chat.completions.with_raw_response.create(
        model="faq", messages=[{"role": "user", "content": "What is the capital of Italy?"}],
        temperature=0, max_tokens=64, stop=[".", ",", "\n"], stream=True)
    assert raw.headers["x-cache"] == "exact"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == first.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2 or len(text) < 24
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_cache_control(client):
    q = "What colour is the sky on a clear day?"
    h, _ = chat(client, q, headers={"Cache-Control": "no-store"})
    assert h["x-cache"] == "miss"
    h, _ = chat(client, q)
    assert h["x-cache"] == "miss"  # no-store left nothing behind; this one is stored
    h, _ = chat(client, q, headers={"Cache-Control": "no-cache"})
    assert h["x-cache"] == "bypass"
    h, _ = chat(client, q, headers={"Cache-Control": "max-age=0"})
    assert h["x-cache"] == "miss"
    h, _ = chat(client, q, extra_body={"cache": {"no_cache": True}})
    assert h["x-cache"] == "bypass"
    h, _ = chat(client, q)
    assert h["x-cache"] == "exact"


def test_namespaces_do_not_share(client):
    q = "How many legs does a spider have?"
    chat(client, q, headers={"x-cache-namespace": "team-1"})
    h, _ = chat(client, q, headers={"x-cache-namespace": "team-1"})
    assert h["x-cache"] == "exact"
    h, _ = chat(client, q, headers={"x-cache-namespace": "team-2"})
    assert h["x-cache"] == "miss"
    h, _ = chat(client, q, extra_body={"cache": {"namespace": "team-1"}})
    assert h["x-cache"] == "exact"


def test_length_errors_and_aborts_are_not_stored(client, gw, engine_server):
    before = stats(gw)["routes"]["faq"]["stores"]
    _, cut = chat(client, "Write a long story about a dragon", max_tokens=3, stop=None)
    assert cut.choices[0].finish_reason == "length"
    h, _ = chat(client, "Write a long story about a dragon", max_tokens=3, stop=None)
    assert h["x-cache"] == "miss"
    with pytest.raises(openai.APIStatusError):
        chat(client, "Anything at all", model="down")
    assert stats(gw)["routes"]["down"]["stores"] == 0
    # an answer that would end in "stop" (end of text or "200"), left after its first line
    long_ask = "Count from 1 to 200, separated by commas"
    with client.chat.completions.with_streaming_response.create(
            model="faq", messages=[{"role": "user", "content": long_ask}],
            temperature=0, max_tokens=1500, stop=["200"], stream=True) as resp:
        for _ in resp.iter_lines():
            break  # leave after the first line: the stream is aborted
    assert wait_until(lambda: engine_gauge(engine_server, "num_requests_running") == 0)
    assert stats(gw)["routes"]["faq"]["stores"] == before


def test_several_choices_bypass_the_cache(client, gw):
    q = "Name a fruit that is red."
    chat(client, q)  # stored: one choice
    h, _ = chat(client, q)
    assert h["x-cache"] == "exact"
    before = stats(gw)["routes"]["faq"]
    for _ in range(2):  # neither served from the cache nor stored in it
        h, answer = chat(client, q, n=2)
        assert h["x-cache"] == "bypass" and [c.index for c in answer.choices] == [0, 1]
    after = stats(gw)["routes"]["faq"]
    assert after["bypasses"] == before["bypasses"] + 2 and after["stores"] == before["stores"]


def test_logprobs_bypass_the_cache(client):
    q = "Name a fruit that is yellow."
    chat(client, q)
    h, answer = chat(client, q, logprobs=True)  # stored without them: not served from there
    assert h["x-cache"] == "bypass" and answer.choices[0].logprobs.content


def test_routes_without_caching_say_bypass(client):
    h, _ = chat(client, "What is two plus two?", model="plain")
    assert h["x-cache"] == "bypass"


def test_tenants_never_share(engine_server):
    keys = [{"key": "key-a", "tenant": "team-a"}, {"key": "key-b", "tenant": "team-b"}]
    server = GatewayThread(cache_config(engine_server.base_url, keys=keys)).start()
    try:
        a = openai.OpenAI(base_url=server.base_url + "/v1", api_key="key-a", max_retries=0)
        b = openai.OpenAI(base_url=server.base_url + "/v1", api_key="key-b", max_retries=0)
        chat(a, "What is the boiling point of water?")
        assert chat(a, "What is the boiling point of water?")[0]["x-cache"] == "exact"
        assert chat(b, "What is the boiling point of water?")[0]["x-cache"] == "miss"
        assert chat(b, "what is the boiling point of water")[0]["x-cache"] == "semantic"
    finally:
        server.stop()


def cache_metric(gw, name: str, route: str) -> float:
    prefix = f'headstart_cache_{name}_total{{route="{route}"}} '
    for line in httpx.get(gw.base_url + "/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    raise AssertionError(f"no metric headstart_cache_{name}_total for {route}")


def test_cache_counters_are_exported_to_prometheus(client, gw):
    before = {n: cache_metric(gw, n, "faq") for n in ("exact_hits", "misses", "hits")}
    chat(client, "How many legs does a spider have?")
    chat(client, "How many legs does a spider have?")
    assert cache_metric(gw, "exact_hits", "faq") == before["exact_hits"] + 1
    assert cache_metric(gw, "misses", "faq") == before["misses"] + 1
    assert cache_metric(gw, "hits", "faq") == before["hits"] + 1
    routes = stats(gw)["routes"]["faq"]
    for name in ("exact_hits", "semantic_hits", "misses", "guard_rejections", "store_errors"):
        assert cache_metric(gw, name, "faq") == routes[name]
