"""engine/serving/kv_transfer.py and roles.py: `headstart engine --role prefill|decode`, three
real engine processes on loopback (a prefill one, a decode one, and one of role `both` as
the reference), driven with the official `openai` SDK as vLLM's proxy drives a pair: the
prefill engine reads the prompt (`max_tokens: 1`, `kv_transfer_params:
{"do_remote_decode": true}`), the decode engine gets the original request with the
`kv_transfer_params` the prefill answer returned."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.serving import roles
from engine.serving.openai_engine import OpenAIEngine
from openai_api import APIError, ChatCompletionRequest
from tests.support.processes import REPO, ServerProcess, free_port, headstart_cmd

MODEL = "smollm2-135m-instruct"
BLOCK = 16
STORY = ("The history of the bicycle began in the early nineteenth century with the "
         "draisine, a running machine without pedals. ")


def engine_process(*flags: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(headstart_cmd("engine", "--port", str(port), "--kv-cache-memory-mb",
                                       "64", "--log-level", "warning", *flags), port,
                         env={"OMP_NUM_THREADS": "1"}, timeout_s=300)


@pytest.fixture(scope="module")
def engines():
    """(prefill, decode, both): started side by side, stopped at the end of the module."""
    procs = [engine_process("--role", "prefill"), engine_process("--role", "decode"),
             engine_process()]
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(ServerProcess.start, procs))
        yield tuple(procs)
    finally:
        for proc in procs:
            proc.stop()


def client(proc: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def chat(topic: str, repeat: int) -> list[dict]:
    """A conversation whose first block is its own (`topic` leads the system prompt)."""
    return [{"role": "system", "content": f"{topic} You answer in plain prose."},
            {"role": "user", "content": f"{STORY * repeat}Tell me more."}]


def metric(proc: ServerProcess, name: str, direction: str | None = None) -> float:
    """One `headstart_engine_kv_handover_*` counter of `proc`'s /metrics."""
    labels = f'{{direction="{direction}"}}' if direction else ""
    text = httpx.get(proc.base_url + "/metrics", timeout=10).text
    found = re.search(rf"^headstart_engine_kv_handover_{name}_total{re.escape(labels)} (\S+)$",
                      text, re.M)
    assert found, f"{name} {labels} missing from /metrics"
    return float(found.group(1))


def prefill(proc: ServerProcess, messages: list[dict]) -> dict:
    """The prefill engine's answer to `messages` for a remote decode: its kv_transfer_params."""
    answer = client(proc).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=1, temperature=0,
        extra_body={"kv_transfer_params": {"do_remote_decode": True}})
    params = answer.model_extra["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    return params


def test_greedy_answer_through_prefill_and_decode_is_one_engines(engines) -> None:
    prefill_engine, decode_engine, both = engines
    messages = chat("Bicycles.", 36)  # ~750 tokens: the blocks load in two pieces
    expected = client(both).chat.completions.create(model=MODEL, messages=messages,
                                                     max_tokens=32, temperature=0)
    sent, received = metric(prefill_engine, "blocks", "sent"), \
        metric(decode_engine, "blocks", "received")
    params = prefill(prefill_engine, messages)
    prompt = expected.usage.prompt_tokens
    assert len(params["remote_block_hashes"]) == prompt // BLOCK
    assert params["remote_port"] > 0 and params["remote_host"] == "127.0.0.1"

    got = client(decode_engine).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=32, temperature=0,
        extra_body={"kv_transfer_params": params})
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.usage.prompt_tokens == prompt
    # the decode engine computed none of the prompt: the full blocks, the last partial one
    # and the first token came from the prefill engine
    assert params["first_token_id"] >= 0
    assert got.usage.prompt_tokens_details.cached_tokens == prompt
    handed = -(-prompt // BLOCK)
    assert metric(prefill_engine, "blocks", "sent") - sent == handed
    assert metric(decode_engine, "blocks", "received") - received == handed
    assert metric(decode_engine, "bytes", "received") > 0


def test_a_streamed_completion_decodes_from_handed_blocks(engines) -> None:
    prefill_engine, decode_engine, both = engines
    prompt = f"Tricycles. {STORY * 7}In short,"
    expected = client(both).completions.create(model=MODEL, prompt=prompt, max_tokens=24,
                                               temperature=0)
    answer = httpx.post(prefill_engine.base_url + "/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0,
        "kv_transfer_params": {"do_remote_decode": True}}).json()
    stream = client(decode_engine).completions.create(
        model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True},
        extra_body={"kv_transfer_params": answer["kv_transfer_params"]})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected.choices[0].text
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens


def test_a_handover_from_a_gone_engine_is_computed_on_decode(engines) -> None:
    prefill_engine, decode_engine, both = engines
    messages = chat("Unicycles.", 6)
    expected = client(both).chat.completions.create(model=MODEL, messages=messages,
                                                     max_tokens=16, temperature=0)
    params = {**prefill(prefill_engine, messages), "remote_port": free_port()}  # nobody there
    failures = metric(decode_engine, "failures")
    got = client(decode_engine).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, temperature=0,
        extra_body={"kv_transfer_params": params})
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.usage.prompt_tokens_details.cached_tokens == 0
    assert metric(decode_engine, "failures") == failures + 1


@pytest.mark.parametrize(("role", "params", "extra", "param", "message"), [
    ("both", {"do_remote_decode": True}, {}, "kv_transfer_params",
     "needs an engine started with --role prefill or --role decode"),
    ("both", {"do_remote_prefill": True, "remote_host": "x", "remote_port": 1}, {},
     "kv_transfer_params", "needs an engine started with --role"),
    ("decode", {"do_remote_decode": True}, {}, "kv_transfer_params.do_remote_decode",
     "only a prefill engine hands its blocks over"),
    ("prefill", {"do_remote_prefill": True}, {}, "kv_transfer_params.do_remote_prefill",
     "only a decode engine loads handed blocks"),
    ("prefill", {"do_remote_decode": True}, {"stream": True}, "stream",
     "answered unstreamed"),
    ("prefill", {"do_remote_decode": True}, {"n": 2}, "n", "reads one prompt, once"),
    ("decode", {"do_remote_prefill": True, "remote_port": 9}, {},
     "kv_transfer_params.remote_host", "remote_host must name"),
    ("decode", {"do_remote_prefill": True, "remote_host": "h", "remote_port": 70000}, {},
     "kv_transfer_params.remote_port", "1-65535"),
    ("decode", {"do_remote_prefill": True, "remote_host": "h", "remote_port": 9,
                "remote_block_hashes": ["abc"]}, {}, "kv_transfer_params.remote_block_hashes",
     "32 hex digits"),
    ("decode", {"do_remote_prefill": True, "remote_host": "h", "remote_port": 9,
                "first_token_id": -1}, {}, "kv_transfer_params.first_token_id", "a token id"),
    ("decode", "yes", {}, "kv_transfer_params", "must be an object"),
])
def test_handovers_an_engine_cannot_do_are_a_400(engines, role, params, extra, param,
                                                  message) -> None:
    proc = dict(zip(("prefill", "decode", "both"), engines, strict=True))[role]
    r = httpx.post(proc.base_url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2,
        "kv_transfer_params": params, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and message in error["message"]


def test_params_that_ask_for_no_handover_change_nothing(engines) -> None:
    _, _, both = engines
    r = client(both).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi."}], max_tokens=2,
        extra_body={"kv_transfer_params": {"do_remote_decode": False}})
    assert r.usage.completion_tokens == 2 and "kv_transfer_params" not in (r.model_extra or {})


@pytest.mark.parametrize(("flags", "message"), [
    (["--role", "prefill", "--no-prefix-caching"],
     "--role prefill hands KV blocks over by their prefix-cache hashes"),
    (["--role", "decode", "--kv-transfer-port", "5600"],
     "--kv-transfer-port applies to --role prefill only"),
    (["--role", "prefill", "--kv-transfer-port", "70000"],
     "--kv-transfer-port 70000 is not a port"),
    (["--role", "prefill", "--port", "5600", "--kv-transfer-port", "5600"],
     "--kv-transfer-port 5600 is the engine's own --port"),
])
def test_bad_role_flags_stop_the_command(flags, message) -> None:
    done = subprocess.run(headstart_cmd("engine", *flags), capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    assert f"headstart engine: error: {message}" in done.stderr


def test_an_unknown_role_is_refused_by_the_parser() -> None:
    done = subprocess.run(headstart_cmd("engine", "--role", "encode"), capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "invalid choice: 'encode'" in done.stderr


def test_the_block_server_never_takes_the_engines_own_port(monkeypatch) -> None:
    """The engine binds its HTTP port after the block server binds port 0, and the kernel
    may hand the block server that port (free a moment ago, when it was chosen)."""
    ports, made = iter([5600, 5600, 5601]), []

    class ScriptedServer:
        def __init__(self, host, port, layout, export) -> None:
            self.port, self.started, self.closed = next(ports), False, False
            made.append(self)

        def start(self):
            self.started = True
            return self

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(roles, "BlockServer", ScriptedServer)
    server = roles.bind_block_server("127.0.0.1", 0, None, None, http_port=5600)
    assert server.port == 5601 and server.started
    assert [(s.started, s.closed) for s in made] == [(False, True), (False, True), (True, False)]
    with pytest.raises(ValueError, match="no free port for the KV block server"):
        roles.bind_block_server("127.0.0.1", 0, None, None, http_port=5600, tries=0)


async def test_the_engine_in_a_gateways_process_refuses_a_handover(smollm_bf16) -> None:
    """`kind: engine` upstreams call OpenAIEngine.stream without a handover: role `both`."""
    engine = AsyncEngine(EngineConfig(num_kv_blocks=64), loaded=tuple(smollm_bf16))
    request = ChatCompletionRequest.model_validate({
        "model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2,
        "kv_transfer_params": {"do_remote_decode": True}})
    try:
        with pytest.raises(APIError) as e:
            await anext(OpenAIEngine(engine).stream(request))
        assert (e.value.status, e.value.param) == (400, "kv_transfer_params")
    finally:
        await engine.shutdown()
