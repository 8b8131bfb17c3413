"""The `openai` upstream: its error mapping (client errors keep their status, server errors
become 502/503/504 naming the upstream), and for real against `headstart engine`."""

from __future__ import annotations

import json

import pytest

from engine.protocol import APIError, ChatCompletionChunk
from gateway.config import UpstreamConfig
from gateway.upstreams.openai_compat import OpenAICompatUpstream


@pytest.fixture
def upstream() -> OpenAICompatUpstream:
    return OpenAICompatUpstream(UpstreamConfig(kind="openai", name="vllm",
                                               base_url="http://127.0.0.1:1/v1"))


def body(message: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "param": param, "code": "c"}}).encode()


@pytest.mark.parametrize("status, expected", [(400, 400), (404, 404), (429, 429), (500, 502),
                                              (401, 502), (503, 503), (504, 504)])
def test_status_mapping(upstream, status, expected):
    err = upstream._status_error(status, body("nope", "max_tokens"))
    assert err.status == expected and err.message.startswith("upstream 'vllm': ")
    if expected == status and status < 500:
        assert err.param == "max_tokens"


def test_non_json_error_body(upstream):
    err = upstream._status_error(502, b"<html>bad gateway</html>")
    assert err.status == 502 and "bad gateway" in err.message


def test_error_frame_mid_stream(upstream):
    with pytest.raises(APIError) as info:
        upstream._parse(json.dumps({"error": {"message": "engine died"}}), ChatCompletionChunk)
    assert info.value.status == 502 and "engine died" in info.value.message


def test_payload_forces_streaming_with_usage(upstream):
    from engine.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate({
        "model": "client-name", "messages": [{"role": "user", "content": "hi"}],
        "session_id": "s", "cache": {"no_store": True}, "top_k": 5})
    payload = upstream._payload(request)
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True}
    assert payload["model"] == "client-name" and payload["top_k"] == 5
    assert "cache" not in payload and "session_id" not in payload and "n" not in payload


def test_remote_route_streams_from_headstart_engine(client):
    chunks = list(client.chat.completions.create(
        model="remote-x", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
        stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens > 0 and chunks[0].model == "remote-x"
