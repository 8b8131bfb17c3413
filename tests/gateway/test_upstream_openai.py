"""The `openai` upstream: its error mapping (client errors keep their status, server errors
become 502/503/504 naming the upstream), and for real against `headstart engine`."""

from __future__ import annotations

import json

import pytest

from gateway.config import UpstreamConfig
from gateway.upstreams.openai_compat import OpenAICompatUpstream
from openai_api import APIError, ChatCompletionChunk


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


def test_payload_is_asked_the_way_the_client_asked(upstream):
    from openai_api import ChatCompletionRequest

    fields = {"model": "client-name", "messages": [{"role": "user", "content": "hi"}],
              "session_id": "s", "cache": {"no_store": True}, "top_k": 5}
    streamed = upstream._payload(ChatCompletionRequest.model_validate({**fields, "stream": True}))
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert streamed["model"] == "client-name" and streamed["top_k"] == 5
    assert "cache" not in streamed and "session_id" not in streamed and "n" not in streamed
    whole = upstream._payload(ChatCompletionRequest.model_validate(fields))
    assert "stream" not in whole and "stream_options" not in whole and whole["top_k"] == 5
    always = OpenAICompatUpstream(UpstreamConfig(kind="openai", name="vllm", always_stream=True,
                                                 base_url="http://127.0.0.1:1/v1"))
    assert always._payload(ChatCompletionRequest.model_validate(fields))["stream"] is True


def test_always_stream_is_for_openai_upstreams_only():
    with pytest.raises(ValueError, match="always_stream"):
        UpstreamConfig(kind="litellm", model="openai/x", always_stream=True)


def test_remote_route_streams_from_headstart_engine(client):
    chunks = list(client.chat.completions.create(
        model="remote-x", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
        stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens > 0 and chunks[0].model == "remote-x"


@pytest.mark.parametrize("model", ["remote-x", "always-stream"])
def test_remote_route_answers_unstreamed_from_headstart_engine(client, model):
    """Asked unstreamed (`remote`), or streamed and folded (`always_stream`): one answer."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=3)
    answer = raw.parse()
    assert raw.headers["x-headstart-upstream"] in ("remote", "remote-always")
    assert answer.model == model and answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content and answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 3 and answer.usage.prompt_tokens > 0
    text = client.completions.create(model=model, prompt="One, two,", max_tokens=2)
    assert text.choices[0].text and text.usage.completion_tokens == 2
