"""engine/serving/server.py: the engine's OpenAI server, served for real over HTTP on a free port and
driven with the official `openai` SDK (raw httpx where the SDK cannot send the bad input).

The app runs in uvicorn on a thread of this process around the session's bf16 model, so the
tests can look at the engine itself; one slow test starts `python -m engine.serving.server` as a
process of its own.
"""

from __future__ import annotations

import re
import sys
import threading
import time

import httpx
import openai
import pytest
import uvicorn

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.serving.server import create_engine_app, engine_config, parse_args
from tests.support.processes import ServerProcess, free_port

MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "Say hello."}]


class ThreadServer:
    """uvicorn serving `app` on a free loopback port from a daemon thread."""

    def __init__(self, app) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def engine(smollm_bf16) -> AsyncEngine:
    return AsyncEngine(EngineConfig(kv_cache_memory_mb=128), loaded=tuple(smollm_bf16))


@pytest.fixture(scope="module")
def server(engine):
    srv = ThreadServer(create_engine_app(engine, owns_engine=True)).start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def metric(server, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def wait_idle(engine: AsyncEngine, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.kv_blocks_used == 0 and stats.num_running == 0 and stats.num_waiting == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"the engine still holds KV blocks: {engine.stats()}")


# ---------------------------------------------------------------- command line


def test_served_name_is_the_default_or_the_model_file_stem():
    assert engine_config(parse_args([])).model_name == MODEL
    config = engine_config(parse_args(["--model", "/m/Tiny-Llama.Q8_0.gguf", "--seed", "3",
                                       "--max-num-batched-tokens", "256"]))
    assert (config.model_name, config.seed, config.max_num_batched_tokens) == (
        "Tiny-Llama.Q8_0", 3, 256)
    assert engine_config(parse_args(["--served-model-name", "x"])).model_name == "x"


# ---------------------------------------------------------------- happy paths


def test_health_and_models(server, client):
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 10 and 1 <= u.completion_tokens <= 8
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_chat_with_tools_is_answered(client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    r = client.chat.completions.create(model=MODEL, messages=HI, tools=tools, max_tokens=2)
    assert r.usage.prompt_tokens > 0 and r.choices[0].finish_reason in ("stop", "length")


def test_chat_stream_with_usage(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and set(finishes[:-1]) == {None}
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and len(content_chunks) <= usage.completion_tokens <= 8
    assert usage.prompt_tokens > 10
    assert all(c.usage is None for c in chunks[:-1]) and len({c.id for c in chunks}) == 1


def test_sse_frames_end_with_done(server):
    body = {"model": MODEL, "messages": HI, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body,
                      timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        frames = [line for line in r.iter_lines() if line]
    assert all(f.startswith("data: ") for f in frames) and frames[-1] == "data: [DONE]"


def test_completions_stream_and_not(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6,
                                  temperature=0, echo=True)
    assert r.object == "text_completion"
    assert r.choices[0].text.startswith("The capital of France is")
    assert r.usage.completion_tokens <= 6
    chunks = list(client.completions.create(model=MODEL, prompt="1, 2, 3,", max_tokens=6,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage.prompt_tokens == 8  # "1" "," " " "2" "," " " "3" ","


def test_cached_tokens_rise_on_the_second_turn(server, client):
    system = "You are a museum guide. " + " ".join(
        f"Room {i} holds paintings from the year {1500 + i}." for i in range(40))
    turn1 = [{"role": "system", "content": system},
             {"role": "user", "content": "Which room has paintings from 1520?"}]
    first = client.chat.completions.create(model=MODEL, messages=turn1, max_tokens=16,
                                           temperature=0, extra_headers={"x-session-id": "s1"})
    turn2 = [*turn1, {"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And from 1530?"}]
    second = client.chat.completions.create(model=MODEL, messages=turn2, max_tokens=8,
                                            temperature=0, extra_body={"session_id": "s1"})
    cached1 = first.usage.prompt_tokens_details.cached_tokens
    cached2 = second.usage.prompt_tokens_details.cached_tokens
    assert cached2 > cached1
    assert cached2 >= first.usage.prompt_tokens // 16 * 16  # every full block of turn 1
    assert cached2 < second.usage.prompt_tokens
    assert metric(server, "headstart_engine_prefix_hit_tokens_total") >= cached2


def test_session_ids_from_header_and_body_reach_the_engine(client, engine):
    client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2,
                                   extra_headers={"x-session-id": "sess-header"})
    client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2,
                                   extra_body={"session_id": "sess-body"})
    assert {"sess-header", "sess-body"} <= set(engine.engine.kv.session_last_seen)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("fields", "error", "param", "code"), [
    ({"model": "gpt-4o"}, openai.NotFoundError, "model", "model_not_found"),
    ({"messages": [{"role": "user", "content": "word " * 9000}]}, openai.BadRequestError,
     "messages", "context_length_exceeded"),
    ({"max_tokens": 10**6}, openai.BadRequestError, "max_tokens", "context_length_exceeded"),
    ({"temperature": 5}, openai.BadRequestError, "temperature", "invalid_value"),
    ({"top_p": 0}, openai.BadRequestError, "top_p", "invalid_value"),
    ({"n": 129}, openai.BadRequestError, "n", "invalid_value"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, openai.BadRequestError,
     "messages[0].role", "invalid_value"),
    ({"stop": [""]}, openai.BadRequestError, "stop", None),
])
def test_bad_chat_requests_get_openai_errors(client, fields, error, param, code):
    args = {"model": MODEL, "messages": HI, "max_tokens": 4, **fields}
    with pytest.raises(error) as info:
        client.chat.completions.create(**args)
    body = info.value.body
    assert body["param"] == param and body["code"] == code and body["message"]
    assert body["type"] in ("invalid_request_error", "not_found_error")


@pytest.mark.parametrize(("content", "code"), [
    (b'{"model": "smollm2-135m-instruct", "messages": [', "invalid_json"),
    (b"\xff\xfe not utf-8", "invalid_encoding"),
    (b'"just a string"', "invalid_json"),
    (b"", "invalid_json"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}], "model": "x"}',
     "invalid_json"),  # a lone surrogate: no UTF-8 text can hold it
])
def test_malformed_bodies_get_400(server, content, code):
    r = httpx.post(server.base_url + "/v1/chat/completions", content=content,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == code


def test_missing_fields_name_the_field(server):
    r = httpx.post(server.base_url + "/v1/chat/completions", json={"model": MODEL})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "Missing required parameter: 'messages'.",
                                 "type": "invalid_request_error", "param": "messages",
                                 "code": "missing_required_parameter"}
    r = httpx.post(server.base_url + "/v1/completions", json={"model": MODEL, "prompt": [1, -5]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = httpx.get(server.base_url + "/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_the_server_keeps_serving_after_bad_input(client):
    r = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")


# ---------------------------------------------------------------- disconnects and metrics


def test_a_dropped_stream_frees_its_blocks(server, engine):
    wait_idle(engine)
    body = {"model": MODEL, "messages": HI, "max_tokens": 2000, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body,
                      timeout=120) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
        assert engine.stats().kv_blocks_used > 0 and engine.stats().num_running == 1
    wait_idle(engine)


def test_a_client_gone_before_a_non_streamed_answer_frees_its_blocks(server, engine):
    wait_idle(engine)
    body = {"model": MODEL, "messages": HI, "max_tokens": 2000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=1.5)
    wait_idle(engine)
    aborted = metric(server, 'headstart_engine_requests_total{endpoint="chat",'
                             'finish_reason="abort"}')
    assert aborted >= 2


def test_metrics_report_latencies_and_cache_use(server, client):
    client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert metric(server, "headstart_engine_time_to_first_token_seconds_count") >= 1
    assert metric(server, "headstart_engine_queue_time_seconds_count") >= 1
    assert metric(server, "headstart_engine_kv_blocks_total") > 0
    assert metric(server, "headstart_engine_prompt_tokens_total") > 0
    assert metric(server, "headstart_engine_num_requests_waiting") == 0


@pytest.mark.slow
def test_python_m_engine_server_serves_under_the_given_name():
    port = free_port()
    proc = ServerProcess([sys.executable, "-m", "engine.serving.server", "--port", str(port),
                          "--served-model-name", "tiny", "--kv-cache-memory-mb", "64"],
                         port, timeout_s=600).start()
    try:
        c = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in c.models.list().data] == ["tiny"]
        r = c.chat.completions.create(model="tiny", messages=HI, max_tokens=2)
        assert r.model == "tiny" and r.usage.completion_tokens >= 1
    finally:
        proc.stop()
