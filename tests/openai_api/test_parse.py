"""openai_api/parse.py: one body parser for both sides: limits, encodings, JSON."""

from __future__ import annotations

import pytest
from starlette.requests import ClientDisconnect, Request

from openai_api import APIError, ChatCompletionRequest, parse_model, read_body, receive_body
from tests.support.asgi import posted


def request(headers: dict[str, str] | None = None, body: bytes = b"") -> Request:
    return posted(headers, body)


async def test_read_body_limits():
    assert await read_body(request(body=b"x" * 10), limit=10) == b"x" * 10
    with pytest.raises(APIError) as info:
        await read_body(request(body=b"x" * 11), limit=10)
    assert info.value.status == 413
    with pytest.raises(APIError) as info:  # a lying Content-Length is refused up front
        await read_body(request({"content-length": "999"}, b"x"), limit=10)
    assert info.value.status == 413


@pytest.mark.parametrize("raw, code", [(b"\xff", "invalid_encoding"), (b"  ", "invalid_json"),
                                       (b"{", "invalid_json"), (b'"str"', "invalid_json")])
def test_parse_model_errors(raw, code):
    with pytest.raises(APIError) as info:
        parse_model(raw, ChatCompletionRequest)
    assert info.value.status == 400 and info.value.code == code


def receiver(*messages: dict):
    queue = list(messages)

    async def receive():
        return queue.pop(0)
    return receive


async def test_receive_body_joins_pieces_and_limits():
    receive = receiver({"type": "http.request", "body": b"ab", "more_body": True},
                       {"type": "http.request", "body": b"cd", "more_body": False})
    assert await receive_body(receive, None, limit=10) == b"abcd"
    receive = receiver({"type": "http.request", "body": b"x" * 6, "more_body": True},
                       {"type": "http.request", "body": b"x" * 6, "more_body": False})
    with pytest.raises(APIError) as info:
        await receive_body(receive, None, limit=10)
    assert info.value.status == 413
    with pytest.raises(APIError) as info:
        await receive_body(receiver(), "999", limit=10)
    assert info.value.status == 413
    with pytest.raises(APIError) as info:
        await receive_body(receiver(), "ten", limit=10)
    assert info.value.status == 400


async def test_receive_body_raises_when_the_client_leaves():
    receive = receiver({"type": "http.request", "body": b"ab", "more_body": True},
                       {"type": "http.disconnect"})
    with pytest.raises(ClientDisconnect):
        await receive_body(receive, None, limit=10)


def test_a_bad_field_is_named_as_openai_names_it():
    with pytest.raises(APIError) as info:
        parse_model(b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}',
                    ChatCompletionRequest)
    assert (info.value.status, info.value.param, info.value.code) == (
        400, "messages[0].role", "invalid_value")
    with pytest.raises(APIError) as info:
        parse_model(b'{"model": "m"}', ChatCompletionRequest)
    assert info.value.body()["error"] == {
        "message": "Missing required parameter: 'messages'.", "type": "invalid_request_error",
        "param": "messages", "code": "missing_required_parameter"}
