"""Hostile and unusual input: content parts the model cannot read, parameters the engine
would otherwise drop, `logit_bias` honoured, and connections that send too much or too
slowly (headers, bodies, WebSocket frames). Real gateways, the official SDK where it can
send the input, raw sockets where it cannot."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.gateway.conftest import GatewayThread

MODEL = "smollm2-135m-instruct"
LIMITS = {"max_body_bytes": 4096, "max_header_bytes": 2048, "header_timeout_s": 1.0,
          "body_timeout_s": 1.0}


def refused(client: openai.OpenAI, **fields) -> dict:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**{"model": MODEL, "max_tokens": 2, **fields})
    return err.value.body


HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "file", "file": {"file_id": "file-1"}},
    {"text": "no type"},
])
def test_a_part_the_model_cannot_read_is_a_400_naming_it(client, part):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    error = refused(client, messages=messages)
    assert error["param"] == "messages[1].content[1]"
    assert error["code"] == "unsupported_content" and "text only" in error["message"]


@pytest.mark.parametrize("fields,param", [
    ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]},
     "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"tool_choice": {"type": "function", "function": {"name": "g"}},
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ({"extra_body": {"min_p": 0.1}}, "min_p"),
    ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
    ({"extra_body": {"no_such_field": 1}}, "no_such_field"),
    ({"logit_bias": {"99999999": 5}}, "logit_bias"),
    ({"logit_bias": {"42": 101}}, "logit_bias"),
    ({"logit_bias": {"forty-two": 1}}, "logit_bias"),
])
def test_a_parameter_the_engine_would_not_honour_is_a_400(client, fields, param):
    error = refused(client, messages=HELLO, **fields)
    assert error["param"] == param


def test_fields_that_change_no_answer_are_accepted(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=2, user="u1", store=False,
        metadata={"team": "a"}, parallel_tool_calls=True, modalities=["text"])
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_logit_bias_is_honoured(gateway, client):
    tokenizer = gateway.app.state.engine.tokenizer
    forced = tokenizer.encode(" banana")[0]
    answer = client.completions.create(model=MODEL, prompt="My favourite colour is",
                                       max_tokens=3, temperature=0,
                                       logit_bias={str(forced): 100})
    assert answer.choices[0].text == tokenizer.decode([forced] * 3)
    plain = client.completions.create(model=MODEL, prompt="My favourite colour is",
                                      max_tokens=1, temperature=0, logprobs=1)
    banned = tokenizer.encode(plain.choices[0].text)[0]
    other = client.completions.create(model=MODEL, prompt="My favourite colour is",
                                      max_tokens=1, temperature=0,
                                      logit_bias={str(banned): -100})
    assert other.choices[0].text != plain.choices[0].text


# ---------------------------------------------------------------- connections


@pytest.fixture(scope="module")
def limited(engine_boot) -> Iterator[tuple[str, int]]:
    """A gateway with small limits in front of `headstart engine`: (base URL, port)."""
    server = GatewayThread({"limits": LIMITS,
                            "upstreams": {"remote": {"kind": "openai", "model": MODEL,
                                                     "base_url": engine_boot.wait().base_url
                                                     + "/v1"}},
                            "routes": [{"name": "remote", "models": [MODEL],
                                        "upstream": "remote"}]}).start()
    yield server.base_url, server.port
    server.stop()


def read_response(sock: socket.socket) -> tuple[int, dict]:
    """Status and JSON body of the one response the server sends before closing."""
    data = b""
    sock.settimeout(15)
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    return int(head.split(b" ")[1]), json.loads(body)


def test_oversized_headers_get_431_and_the_connection_closes(limited):
    _, port = limited
    for path in (b"/v1/chat/completions", b"/health"):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 4000
                         + b"\r\ncontent-length: 2\r\n\r\n{}")
            status, body = read_response(sock)
        assert status == 431 and body["error"]["code"] == "headers_too_large"


@pytest.mark.parametrize("path", [b"/v1/chat/completions", b"/v1/embeddings"])
def test_a_body_that_trickles_in_gets_408_and_the_connection_closes(limited, path):
    _, port = limited
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: 400\r\n\r\n{")
        sent = 1
        sock.settimeout(0.2)
        try:  # one byte every 0.2 s: 80 s for the whole body, were it let through
            while sent < 400:
                sock.sendall(b" ")
                sent += 1
                if sock.recv(1, socket.MSG_PEEK):
                    break
        except (TimeoutError, BlockingIOError):
            pass
        except OSError:
            pass  # the server closed first
        status, body = read_response(sock)
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert sent < 400


def test_headers_that_never_finish_and_silent_connections_get_408(limited):
    _, port = limited
    with socket.create_connection(("127.0.0.1", port)) as silent, \
            socket.create_connection(("127.0.0.1", port)) as partial:
        partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        for sock in (silent, partial):
            status, body = read_response(sock)
            assert status == 408 and "headers did not arrive" in body["error"]["message"]


def test_an_oversized_body_gets_413(limited):
    _, port = limited
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 9000"
                     b"\r\nconnection: close\r\n\r\n" + b" " * 9000)
        sock.settimeout(15)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in data


def test_websocket_frames_too_large_or_malformed_close_with_a_reason(limited):
    base, _ = limited
    url = base.replace("http://", "ws://") + "/v1/ws"
    with connect(url) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session"
        ws.send("not json")  # a bad request: an error message, the socket stays open
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "invalid_json"
        ws.send("x" * 10_000)  # over max_body_bytes: the socket is closed
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1009
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"GET /v1/ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: "
                     b"Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"sec-websocket-version: 13\r\n\r\n")
        time.sleep(0.5)
        sock.sendall(bytes([0x81, 0x82, 0, 0, 0, 0, 0xC3, 0x28]))  # text frame, bad UTF-8
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    close_frame = data[data.rindex(b"\x88"):]  # the server's close frame
    assert int.from_bytes(close_frame[2:4], "big") == 1007


@pytest.mark.parametrize("response", [{"foo": 1}, {"content": 5}, {"choices": [1]},
                                      {"choices": [{"message": {"content": ["x"]}}]}])
def test_a_curated_entry_of_no_known_shape_is_a_400_not_a_500(start_gateway, engine_server,
                                                              response):
    base = start_gateway({"upstreams": {"remote": {"kind": "openai",
                                                   "base_url": engine_server.base_url + "/v1"}},
                          "routes": [{"name": "cached", "models": ["cached"],
                                      "upstream": "remote",
                                      "cache": {"exact": {"enabled": True}}}]})
    r = httpx.post(base + "/admin/cache/entries", timeout=30,
                   json={"route": "cached", "messages": HELLO, "response": response})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response"


def test_a_request_with_an_image_is_not_served_from_the_caches(start_gateway, engine_server):
    base = start_gateway({"upstreams": {"remote": {"kind": "openai", "model": MODEL,
                                                   "base_url": engine_server.base_url + "/v1"}},
                          "routes": [{"name": "cached", "models": [MODEL], "upstream": "remote",
                                      "cache": {"exact": {"enabled": True},
                                                "semantic": {"enabled": True}}}]})
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=60)
    question = [{"type": "text", "text": "What is in this picture?"}]
    for _ in range(2):  # the text alone, answered and then stored
        client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": question}])
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with pytest.raises(openai.BadRequestError) as err:  # refused by the engine behind
        client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": [*question, picture]}])
    assert err.value.body["param"] == "messages[0].content[1]"
