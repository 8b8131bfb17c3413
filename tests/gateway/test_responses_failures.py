"""The Responses API in front of an upstream whose answer a test sets (a scripted
OpenAI-shaped server): the chat request it is sent, an upstream failure before the first
event as an HTTP status, and a stream that breaks off as `response.failed`, never stored."""

from __future__ import annotations

import json

import openai
import pytest

MODEL = "scripted"


def chunk(**delta) -> bytes:
    return b"data: " + json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n"


@pytest.fixture
def sdk(start_gateway, scripted_upstream) -> openai.OpenAI:
    url = start_gateway({
        "upstreams": {"s": {"kind": "openai", "base_url": scripted_upstream.base_url}},
        "routes": [{"name": "s", "models": [MODEL], "upstream": "s"}]})
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def test_the_upstream_is_sent_the_chat_request(sdk, scripted_upstream):
    scripted_upstream.answer = (200, chunk(role="assistant", content="Hi")
                                + b'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk",'
                                b' "created": 1, "model": "scripted", "choices": [{"index": 0,'
                                b' "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
    r = sdk.responses.create(model=MODEL, input="Hello", instructions="Be brief.",
                             max_output_tokens=5, stream=True, tools=[
                                 {"type": "function", "name": "f", "parameters": {}}],
                             tool_choice="none")
    assert [e.type for e in r][-1] == "response.completed"
    path, body = scripted_upstream.requests[0]
    sent = json.loads(body)
    assert path == "/v1/chat/completions" and sent["model"] == MODEL
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hello"}]
    assert (sent["max_tokens"], sent["stream"], sent["tool_choice"]) == (5, True, "none")
    assert sent["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def test_an_upstream_failure_before_the_first_event_is_an_http_status(sdk, scripted_upstream):
    scripted_upstream.answer = (500, b'{"error": {"message": "boom"}}')
    with pytest.raises(openai.APIStatusError) as info:
        sdk.responses.create(model=MODEL, input="Hello", stream=True)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_error"


def test_a_stream_that_breaks_off_ends_with_response_failed_and_is_not_stored(
        sdk, scripted_upstream):
    scripted_upstream.answer = (200, chunk(role="assistant", content="Hel") + b"data: [DONE]\n\n")
    events = list(sdk.responses.create(model=MODEL, input="Hello", stream=True))
    assert [e.type for e in events][-3:] == ["response.content_part.added",
                                             "response.output_text.delta", "response.failed"]
    failed = events[-1].response
    assert (failed.status, failed.error.code) == ("failed", "upstream_error")
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(failed.id)
