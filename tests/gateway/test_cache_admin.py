"""The cache admin API: curated entries, purge, stats, and the admin key."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import GatewayThread
from tests.gateway.test_cache_gateway import ADMIN, cache_config, chat


@pytest.fixture(scope="module")
def gw(engine_server):
    server = GatewayThread(cache_config(engine_server.base_url)).start()
    yield server
    server.stop()


def admin(gw, method: str, path: str, key: str | None = ADMIN, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, gw.base_url + path, headers=headers, **kw)


def test_admin_needs_the_key(gw):
    assert admin(gw, "GET", "/admin/cache/stats", key=None).status_code == 401
    r = admin(gw, "GET", "/admin/cache/stats", key="wrong")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_curated_entry_is_served_then_purged(gw):
    client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key="x", max_retries=0)
    body = {"route": "faq", "messages": [{"role": "user", "content": "What are your opening hours?"}],
            "response": "We are open 9am to 5pm, Monday to Friday.", "namespace": None}
    r = admin(gw, "POST", "/admin/cache/entries", json=body)
    assert r.status_code == 200 and r.json()["stored"]
    raw = client.chat.completions.with_raw_response.create(
        model="faq", messages=[{"role": "user", "content": "what are your opening hours"}],
        temperature=0)
    assert raw.headers["x-cache"] == "semantic"
    assert raw.parse().choices[0].message.content == body["response"]
    stats = admin(gw, "GET", "/admin/cache/stats").json()
    assert stats["routes"]["faq"]["entries"] >= 1 and stats["routes"]["faq"]["semantic_hits"] >= 1
    assert {"hits", "misses", "guard_rejections"} <= set(stats["routes"]["faq"])
    r = admin(gw, "DELETE", "/admin/cache", params={"route": "faq"})
    assert r.status_code == 200 and r.json()["deleted"] >= 1
    h, _ = chat(client, "what are your opening hours", max_tokens=8, stop=None)
    assert h["x-cache"] == "miss"


def test_purge_by_namespace_and_key(gw):
    for ns in ("a", "b"):
        body = {"route": "faq", "namespace": ns, "response": f"answer {ns}",
                "messages": [{"role": "user", "content": "Where is the office?"}]}
        assert admin(gw, "POST", "/admin/cache/entries", json=body).status_code == 200
    assert admin(gw, "DELETE", "/admin/cache", params={"namespace": "a"}).json()["deleted"] == 1
    body["ttl_s"] = 60
    key = admin(gw, "POST", "/admin/cache/entries", json=body).json()["key"]
    assert admin(gw, "DELETE", "/admin/cache", params={"key": key}).json()["deleted"] == 1


def test_bad_admin_input(gw):
    r = admin(gw, "POST", "/admin/cache/entries", json={"route": "nope", "response": "x",
                                                         "messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "route"
    r = admin(gw, "POST", "/admin/cache/entries", json={"route": "faq"})
    assert r.status_code in (400, 422) and "error" in r.json()
