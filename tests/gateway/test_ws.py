"""WebSocket `/v1/ws` with a real `websockets` client: several turns on one socket (one
session), `cached_tokens` rising across turns, errors that keep the socket open, auth."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.sync.client import connect

from tests.gateway.conftest import wait_until


def ws_url(gateway, path: str = "/v1/ws") -> str:
    return gateway.base_url.replace("http://", "ws://") + path


def ask(ws, request: dict) -> tuple[list[dict], dict]:
    """Send one request; the chunks received and the final `done`/`error` message."""
    ws.send(json.dumps(request))
    chunks = []
    while True:
        message = json.loads(ws.recv(timeout=60))
        if message.get("type") in ("done", "error"):
            return chunks, message
        chunks.append(message)


def test_turns_on_one_socket_reuse_the_kv_cache(gateway):
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 8}]
    cached = []
    with connect(ws_url(gateway)) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "session" and hello["session_id"].startswith("ws-")
        for question in ("What is rain?", "And snow?", "And hail?"):
            messages.append({"role": "user", "content": question})
            chunks, done = ask(ws, {"model": "smollm2-135m-instruct", "messages": messages,
                                    "max_tokens": 8, "temperature": 0})
            assert done["type"] == "done" and done["headers"]["x-cache"] == "bypass"
            assert chunks[0]["object"] == "chat.completion.chunk"
            usage = chunks[-1]["usage"]
            cached.append(usage["prompt_tokens_details"]["cached_tokens"])
            answer = "".join(c["choices"][0]["delta"].get("content") or ""
                             for c in chunks if c["choices"])
            messages.append({"role": "assistant", "content": answer})
    assert cached[0] < cached[1] < cached[2], cached


def test_client_given_session_and_errors_keep_the_socket_open(gateway):
    with connect(ws_url(gateway, "/r/remote/v1/ws?session_id=my-session")) as ws:
        assert json.loads(ws.recv(timeout=10))["session_id"] == "my-session"
        _, error = ask(ws, {"model": "x", "messages": []})
        assert error["type"] == "error" and error["error"]["param"] == "messages"
        ws.send(b"{not json")
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "invalid_json"
        chunks, done = ask(ws, {"model": "anything", "messages": [{"role": "user",
                                                                   "content": "hi"}],
                                "max_tokens": 3})
        assert done["type"] == "done" and chunks


@pytest.fixture
def keyed_gateway(start_gateway, engine_server):
    return start_gateway({
        "auth": {"keys": [{"key": "k1", "tenant": "t1"}]},
        "upstreams": {"remote": {"kind": "openai", "base_url": engine_server.base_url + "/v1",
                                 "model": "smollm2-135m-instruct"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "remote"}],
    })


def test_websocket_auth(keyed_gateway):
    url = keyed_gateway.replace("http://", "ws://") + "/v1/ws"
    with connect(url) as ws:
        message = json.loads(ws.recv(timeout=10))
        assert message["type"] == "error" and message["error"]["type"] == "authentication_error"
    with connect(url + "?api_key=k1") as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session"
    with connect(url, additional_headers={"Authorization": "Bearer k1"}) as ws:
        chunks, done = ask(ws, {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 2})
        assert done["type"] == "done"


def test_leaving_mid_answer_frees_the_engines_blocks(gateway):
    engine = gateway.app.state.engine
    with connect(ws_url(gateway)) as ws:
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"model": "smollm2-135m-instruct", "max_tokens": 400,
                            "ignore_eos": True,
                            "messages": [{"role": "user", "content": "Tell me a story."}]}))
        for _ in range(3):
            assert "choices" in json.loads(ws.recv(timeout=60))
        stats = engine.stats()
        assert stats.num_running == 1 and stats.kv_blocks_used > 0
    assert wait_until(lambda: engine.stats().num_running == 0), engine.stats()
    assert engine.stats().kv_blocks_used == 0


def requests_total(base_url: str, route: str, outcome: str) -> float:
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if (line.startswith("headstart_gateway_requests_total{") and f'route="{route}"' in line
                and f'outcome="{outcome}"' in line):
            return float(line.split()[-1])
    return 0.0


def test_leaving_while_the_upstream_is_silent_aborts_at_once(start_gateway, blackhole):
    # the upstream never answers and the route would wait 120 s: only watching the
    # socket ends the request when the client leaves
    base = start_gateway({
        "upstreams": {"stalled": {"kind": "openai",
                                  "base_url": f"http://127.0.0.1:{blackhole.port}/v1"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "stalled", "timeout_s": 120}],
    })
    with connect(base.replace("http://", "ws://") + "/v1/ws") as ws:
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        time.sleep(0.3)
    assert wait_until(lambda: requests_total(base, "r", "aborted") == 1, timeout_s=10)
