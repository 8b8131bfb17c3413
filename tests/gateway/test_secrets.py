"""Secrets stay secret: API keys are kept only as digests and never logged; prompts and
answers are not logged at the default level, whatever goes wrong with the request."""

from __future__ import annotations

import logging

import httpx

from gateway.auth import Authenticator
from gateway.config import AuthConfig

KEY, PROMPT_MARK = "sk-secret-9f8e7d", "zebra-lighthouse-41"


def test_the_authenticator_keeps_no_raw_key():
    auth = Authenticator(AuthConfig(keys=[{"key": KEY, "tenant": "t", "rpm": 5}]),
                         environ={"HEADSTART_API_KEYS": "sk-env-key:t2"})
    kept = repr(vars(auth)) + repr(auth._callers)
    assert KEY not in kept and "sk-env-key" not in kept


def test_keys_and_prompts_never_reach_the_log(start_gateway, engine_server, caplog):
    base = start_gateway({
        "auth": {"keys": [{"key": KEY, "tenant": "t", "rpm": 3}]},
        "upstreams": {"remote": {"kind": "openai", "base_url": engine_server.base_url + "/v1",
                                 "model": "smollm2-135m-instruct"},
                      "dead": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "routes": [{"name": "ok", "models": ["ok"], "upstream": "remote"},
                   {"name": "down", "models": ["down"], "upstream": "dead",
                    "fallback": "remote"}]})
    body = {"max_tokens": 4, "messages": [{"role": "user", "content": f"Say {PROMPT_MARK}"}]}
    with caplog.at_level(logging.INFO):
        with httpx.Client(base_url=base, timeout=60) as http:
            sent = [
                http.post("/v1/chat/completions", json={**body, "model": "ok"},
                          headers={"authorization": f"Bearer {KEY}"}),
                http.post("/v1/chat/completions", json={**body, "model": "down"},
                          headers={"x-api-key": KEY}),  # a failed upstream, then the fallback
                http.post(f"/v1/chat/completions?api_key={KEY}", json={**body, "model": "ok"}),
                http.post("/v1/chat/completions", json={**body, "model": "ok"},
                          headers={"authorization": f"Bearer {KEY}"}),  # over its rpm
                http.post("/v1/chat/completions", json={**body, "model": "ok"},
                          headers={"authorization": f"Bearer {KEY}x"}),  # a wrong key
                http.post("/v1/chat/completions", content=b"{" + PROMPT_MARK.encode(),
                          headers={"authorization": f"Bearer {KEY}"}),  # malformed
            ]
    assert [r.status_code for r in sent] == [200, 200, 200, 429, 401, 400]
    served = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert served  # the fallback was logged: the server's log was being captured
    for record in served:  # (the test's own client logs the URL it sent, key and all)
        text = record.getMessage() + (record.exc_text or "")
        assert KEY not in text and PROMPT_MARK not in text, text
