"""The canned upstream of `bench.experiments.gateway_overhead --canned-upstream`: a real server the
official `openai` SDK can talk to, streamed and not, and one a gateway can proxy."""

from __future__ import annotations

import shutil

import httpx
import openai
import pytest

from tests.gateway.conftest import GatewayThread


def test_answers_like_an_openai_server(canned):
    client = openai.OpenAI(base_url=canned.base_url + "/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="any", messages=messages, max_tokens=1)
    assert whole.choices[0].message.content == "OK"
    assert whole.usage.prompt_tokens_details.cached_tokens == 32
    chunks = list(client.chat.completions.create(model="any", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "OK"
    assert chunks[-1].usage.completion_tokens == 1


def test_bad_requests_get_errors(canned):
    with httpx.Client(base_url=canned.base_url) as http:
        bad = http.post("/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["message"] == "bad JSON"
        assert http.get("/v1/models").status_code == 404
        assert http.get("/health").json() == {"status": "ok"}  # the connection still works


def test_a_gateway_proxies_it(canned):
    gateway = GatewayThread({
        "upstreams": {"canned": {"kind": "openai", "base_url": canned.base_url + "/v1"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "canned"}]}).start()
    try:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "x"}]
        answer = client.chat.completions.create(model="m", messages=messages)
        assert answer.choices[0].message.content == "OK" and answer.model == "m"
        chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "OK"
    finally:
        gateway.stop()


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")
def test_nginx_reference_proxy_forwards_to_it(canned, tmp_path):
    from bench.experiments.gateway_overhead import start_nginx

    nginx = start_nginx("nginx", canned.base_url, tmp_path)
    try:
        client = openai.OpenAI(base_url=nginx.base_url + "/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
        assert answer.choices[0].message.content == "OK"
    finally:
        nginx.stop()
