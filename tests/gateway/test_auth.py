"""API keys → tenants, the admin key, and 401s on a live gateway when keys are configured."""

from __future__ import annotations

import httpx
import openai
import pytest
from starlette.requests import Request

from gateway.auth import Authenticator
from gateway.config import AuthConfig
from openai_api import APIError
from tests.support.processes import free_port


def conn(headers: dict[str, str] | None = None, query: str = "") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw,
                    "query_string": query.encode()})


KEYS = AuthConfig(admin_key="adm", keys=[{"key": "ka", "tenant": "team-a"},
                                         {"key": "kb", "tenant": "team-b"}])


def test_key_maps_to_tenant():
    auth = Authenticator(KEYS, environ={})
    assert auth.tenant_for(conn({"Authorization": "Bearer ka"})) == "team-a"
    assert auth.tenant_for(conn({"x-api-key": "kb"})) == "team-b"
    assert auth.tenant_for(conn(query="api_key=kb")) == "team-b"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"},
                                     {"Authorization": "Bearer "}])
def test_missing_or_wrong_key_is_401(headers):
    with pytest.raises(APIError) as info:
        Authenticator(KEYS, environ={}).tenant_for(conn(headers))
    assert info.value.status == 401


def test_keys_from_environment():
    auth = Authenticator(AuthConfig(), environ={"HEADSTART_API_KEYS": "k1:t1, k2:t2,bad"})
    assert not auth.open
    assert auth.tenant_for(conn({"Authorization": "Bearer k2"})) == "t2"


def test_open_gateway_has_no_tenant_and_open_admin():
    auth = Authenticator(AuthConfig(), environ={})
    assert auth.open and auth.tenant_for(conn({"Authorization": "Bearer x"})) is None
    auth.check_admin(conn())  # no keys, no admin key: nothing to protect


def test_admin_key():
    auth = Authenticator(KEYS, environ={})
    auth.check_admin(conn({"Authorization": "Bearer adm"}))
    for headers in ({}, {"Authorization": "Bearer ka"}):
        with pytest.raises(APIError) as info:
            auth.check_admin(conn(headers))
        assert info.value.status == 401
    closed = Authenticator(AuthConfig(keys=[{"key": "k", "tenant": "t"}]), environ={})
    with pytest.raises(APIError) as info:
        closed.check_admin(conn({"Authorization": "Bearer k"}))
    assert info.value.status == 403


def test_live_gateway_requires_a_key(start_gateway):
    base = start_gateway({
        "auth": {"keys": [{"key": "secret-a", "tenant": "team-a"}]},
        "upstreams": {"dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
        "routes": [{"name": "r", "models": ["m"], "upstream": "dead"}],
    })
    msgs = [{"role": "user", "content": "hi"}]
    for key in ("wrong", ""):
        client = openai.OpenAI(base_url=base + "/v1", api_key=key or "x", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            client.chat.completions.create(model="m", messages=msgs)
        assert info.value.status_code == 401
        assert info.value.body["type"] == "authentication_error"
    r = httpx.get(base + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    # the right key gets through auth; the (dead) upstream then answers 503, naming itself
    client = openai.OpenAI(base_url=base + "/v1", api_key="secret-a", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=msgs)
    assert info.value.status_code == 503 and "upstream 'dead'" in info.value.message
    assert client.models.list().data[0].id == "m"
    assert httpx.get(base + "/health").status_code == 200  # health stays open
