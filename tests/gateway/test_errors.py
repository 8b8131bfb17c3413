"""Bad input on a live gateway: each case gets its 4xx and an OpenAI-style error body, and
nothing reaches the upstream (it is down: anything that got through would be a 503)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.gateway.conftest import GatewayThread
from tests.support.processes import free_port

LIMIT = 4096


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    gateway = GatewayThread({
        "limits": {"max_body_bytes": LIMIT},
        "upstreams": {"dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
        "routes": [{"name": "r", "models": ["m", "m-*"], "upstream": "dead"}],
    }).start()
    yield gateway.base_url
    gateway.stop()


def post(base: str, path: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(base + path, content=content,
                      headers={"content-type": "application/json", **headers})


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert r.headers["x-request-id"]
    return body["error"]


MSGS = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path, body, status, param", [
    ("/v1/chat/completions", b'{"model": "m", "messages": [', 400, None),
    ("/v1/chat/completions", b'{"model": "m"}', 400, "messages"),
    ("/v1/chat/completions", b'{"model": "m", "messages": []}', 400, "messages"),
    ("/v1/chat/completions", b'{"model": "m", "messages": "hi"}', 400, "messages"),
    ("/v1/chat/completions", json.dumps({"model": "m", "messages": MSGS,
                                         "temperature": "hot"}).encode(), 400, "temperature"),
    ("/v1/chat/completions", json.dumps({"model": "m", "messages": MSGS,
                                         "max_tokens": 0}).encode(), 400, "max_tokens"),
    ("/v1/chat/completions", json.dumps({"model": "m", "messages": MSGS,  # strict, as OpenAI
                                         "max_tokens": "5"}).encode(), 400, "max_tokens"),
    ("/v1/chat/completions", json.dumps({"model": "m", "messages": MSGS,
                                         "stream": "true"}).encode(), 400, "stream"),
    ("/v1/chat/completions", json.dumps({"model": "m", "messages": [{"role": "robot",
                                         "content": "x"}]}).encode(), 400, "messages[0].role"),
    ("/v1/chat/completions", json.dumps({"messages": MSGS}).encode(), 400, "model"),
    ("/v1/chat/completions", b"[1, 2]", 400, None),
    ("/v1/chat/completions", b"", 400, None),
    ("/v1/chat/completions", '{"model": "m", "messages": "h\xe9"}'.encode("latin-1"), 400, None),
    ("/v1/completions", b'{"model": "m"}', 400, "prompt"),
    ("/v1/chat/completions", json.dumps({"model": "nope", "messages": MSGS}).encode(), 404,
     "model"),
    ("/r/nope/v1/chat/completions", json.dumps({"model": "m", "messages": MSGS}).encode(), 404,
     None),
    ("/v1/embeddings", b'{"model": "e", "input": []}', 400, "input"),
])
def test_bad_input(base, path, body, status, param):
    r = post(base, path, body)
    assert r.status_code == status, r.text
    err = error_of(r)
    assert err["param"] == param
    assert err["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert "upstream" not in err["message"]


def test_non_utf8_names_the_encoding(base):
    r = post(base, "/v1/chat/completions", b'{"model": "m", "messages": "\xff\xfe"}')
    assert r.status_code == 400 and "UTF-8" in error_of(r)["message"]


def test_malformed_json_says_so(base):
    r = post(base, "/v1/chat/completions", b"{nope")
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json"


def test_oversize_body_by_content_length(base):
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * LIMIT}]})
    r = post(base, "/v1/chat/completions", big.encode())
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"


def test_oversize_body_without_content_length(base):
    def chunks():
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}]}'

    r = httpx.post(base + "/v1/chat/completions", content=chunks())
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"


def test_unknown_path_and_method(base):
    r = httpx.get(base + "/v1/nothing-here")
    assert r.status_code == 404 and error_of(r)["type"] == "not_found_error"
    r = httpx.get(base + "/v1/chat/completions")
    assert r.status_code == 405 and "GET" in error_of(r)["message"]


def test_sdk_sees_openai_errors(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-nope", messages=MSGS)
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[])
    assert info.value.body["param"] == "messages"


def test_upstream_down_is_503_naming_it(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="m-1", messages=MSGS, stream=stream)
        assert info.value.status_code == 503
        assert "upstream 'dead'" in info.value.message
        assert info.value.response.headers["x-request-id"]


@pytest.mark.parametrize("body", [
    b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}',
    b'{"model": "m"}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"}',
    b'{"model": "m", "messages": [',
    b'"just a string"',
    b"\xff\xfe",
])
def test_the_engine_and_the_gateway_give_a_bad_body_the_same_error(base, engine_server, body):
    """One wire layer: the same bad body gets the same status and error from the gateway and
    from `headstart engine`'s own server."""
    at_gateway = post(base, "/v1/chat/completions", body)
    at_engine = post(engine_server.base_url, "/v1/chat/completions", body)
    assert at_gateway.status_code == at_engine.status_code == 400
    assert error_of(at_gateway) == at_engine.json()["error"]
