"""Cross-origin requests (`cors:`): preflights and answers on the generation endpoints (served
in front of FastAPI) and on FastAPI's own routes, over real HTTP to a live gateway."""

from __future__ import annotations

import httpx
import pytest

PAGE = "http://app.example:3000"
ASK = {"model": "remote", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def config(engine_url: str, origins: list[str] | None, keys: bool = False) -> dict:
    out: dict = {
        "upstreams": {"remote": {"kind": "openai", "base_url": engine_url + "/v1",
                                 "model": "smollm2-135m-instruct"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "remote"}],
    }
    if origins is not None:
        out["cors"] = {"allow_origins": origins, "max_age_s": 120}
    if keys:
        out["auth"] = {"keys": [{"key": "sk-page", "tenant": "web"}]}
    return out


def preflight(base: str, path: str, origin: str = PAGE) -> httpx.Response:
    # what a browser sends before a fetch() with JSON and the openai SDK's headers
    return httpx.options(base + path, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})


@pytest.fixture
def cors_gateway(start_gateway, engine_server) -> str:
    return start_gateway(config(engine_server.base_url, [PAGE], keys=True))


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/r/r/v1/completions", "/v1/models"])
def test_a_preflight_from_an_allowed_origin_is_answered(cors_gateway, path):
    r = preflight(cors_gateway, path)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "POST" in r.headers["access-control-allow-methods"]
    allowed = r.headers["access-control-allow-headers"].lower()
    assert all(h in allowed for h in ("authorization", "content-type", "x-stainless-os"))
    assert r.headers["access-control-max-age"] == "120"


def test_a_page_can_read_answers_streams_and_errors(cors_gateway):
    key = {"Origin": PAGE, "Authorization": "Bearer sk-page"}
    r = httpx.post(cors_gateway + "/v1/chat/completions", json=ASK, headers=key)
    assert r.status_code == 200 and r.json()["choices"]
    assert r.headers["access-control-allow-origin"] == PAGE and r.headers["vary"] == "origin"
    exposed = r.headers["access-control-expose-headers"]
    assert "x-request-id" in exposed and "x-cache" in exposed and "server-timing" in exposed
    with httpx.stream("POST", cors_gateway + "/v1/chat/completions",
                      json={**ASK, "stream": True}, headers=key) as s:
        assert s.headers["access-control-allow-origin"] == PAGE
        assert list(s.iter_lines())[-2] == "data: [DONE]"
    # the page must be able to read why it failed, too
    denied = httpx.post(cors_gateway + "/v1/chat/completions", json=ASK,
                        headers={"Origin": PAGE, "Authorization": "Bearer wrong"})
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == PAGE
    models = httpx.get(cors_gateway + "/v1/models", headers=key)
    assert models.headers["access-control-allow-origin"] == PAGE


def test_other_origins_get_no_grant(cors_gateway):
    evil = "http://evil.example"
    assert preflight(cors_gateway, "/v1/chat/completions", evil).status_code == 400
    r = httpx.post(cors_gateway + "/v1/chat/completions", json=ASK,
                   headers={"Origin": evil, "Authorization": "Bearer sk-page"})
    assert r.status_code == 200  # answered (a server cannot stop the request) ...
    assert "access-control-allow-origin" not in r.headers  # ... but the page may not read it


def test_any_origin_with_a_star(start_gateway, engine_server):
    base = start_gateway(config(engine_server.base_url, ["*"]))
    r = httpx.post(base + "/v1/chat/completions", json=ASK, headers={"Origin": "http://x.test"})
    assert r.headers["access-control-allow-origin"] == "*" and "vary" not in r.headers
    assert preflight(base, "/v1/chat/completions", "http://x.test").status_code == 200


def test_without_cors_no_headers_and_no_preflight(start_gateway, engine_server):
    base = start_gateway(config(engine_server.base_url, None))
    r = httpx.post(base + "/v1/chat/completions", json=ASK, headers={"Origin": PAGE})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert preflight(base, "/v1/chat/completions").status_code == 405


def test_a_bad_origin_in_the_config_fails_at_start():
    from gateway.config import ConfigError, GatewayConfig

    with pytest.raises((ConfigError, ValueError), match="not an origin"):
        GatewayConfig.from_dict(config("http://127.0.0.1:1", ["app.example"]))
