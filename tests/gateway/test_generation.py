"""The generation endpoints served in front of FastAPI: which paths they take, and on a live
gateway the behaviours every endpoint keeps (auth before the body, x-request-id on success
and error, 405 for other methods, a gateway-level 500 as an OpenAI-style body)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.generation import match
from tests.gateway.conftest import GatewayThread
from tests.support.processes import free_port


@pytest.mark.parametrize("path, expected", [
    ("/v1/chat/completions", ("chat/completions", None)),
    ("/v1/completions", ("completions", None)),
    ("/v1/chat/completions/", ("chat/completions", None)),
    ("/r/support/v1/chat/completions", ("chat/completions", "support")),
    ("/r/support-2.x/v1/completions", ("completions", "support-2.x")),
    ("/v1/models", None),
    ("/v1/embeddings", None),
    ("/r//v1/chat/completions", None),
    ("/r/a/b/v1/chat/completions", None),
    ("/health", None),
    ("/v2/chat/completions", None),
])
def test_match(path, expected):
    assert match(path) == expected


@pytest.fixture(scope="module")
def keyed() -> Iterator[GatewayThread]:
    gateway = GatewayThread({
        "auth": {"keys": [{"key": "k1", "tenant": "t1"}]},
        "upstreams": {"dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "dead"}],
    }).start()
    yield gateway
    gateway.stop()


def test_auth_comes_before_the_body(keyed):
    r = httpx.post(keyed.base_url + "/v1/chat/completions", content=b"{not json",
                   headers={"x-request-id": "mine-1"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert r.headers["x-request-id"] == "mine-1"


def test_errors_after_auth_keep_the_request_id(keyed):
    auth = {"Authorization": "Bearer k1"}
    r = httpx.post(keyed.base_url + "/r/r/v1/completions", json={"model": "m"},
                   headers=auth)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert r.headers["x-request-id"].startswith("req-")
    r = httpx.post(keyed.base_url + "/v1/chat/completions", headers=auth,
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and "upstream 'dead'" in r.json()["error"]["message"]


def test_other_methods_are_405_with_allow(keyed):
    r = httpx.put(keyed.base_url + "/r/r/v1/chat/completions", content=b"{}")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_the_rest_of_the_api_is_still_fastapi(keyed):
    r = httpx.get(keyed.base_url + "/health")
    assert r.status_code == 200 and r.json()["routes"] == ["r"]
    assert r.headers["x-request-id"]
