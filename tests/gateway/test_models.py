"""`/v1/models` lists the routes' model names; `/r/{route}/v1/models` one route's."""

from __future__ import annotations

import httpx
import openai
import pytest


def test_models_list(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[:3] == ["smollm2-135m-instruct", "remote", "litellm"]
    assert "slow-fallback" in ids


def test_route_models_and_lookup(client, gateway):
    r = httpx.get(gateway.base_url + "/r/remote/v1/models").json()
    assert [m["id"] for m in r["data"]] == ["remote"] and r["object"] == "list"
    assert client.models.retrieve("local-xyz").id == "local-xyz"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nothing")


def test_health_and_metrics(gateway, client):
    health = httpx.get(gateway.base_url + "/health").json()
    assert health["status"] == "ok" and health["engine"] is True
    client.chat.completions.create(model="smollm2-135m-instruct",
                                   messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    text = httpx.get(gateway.base_url + "/metrics").text
    assert 'headstart_gateway_ttft_seconds_count{cache="bypass",route="local"}' in text
    assert 'headstart_gateway_requests_total{outcome="ok",route="local"}' in text
    assert "headstart_gateway_upstream_seconds_bucket" in text
