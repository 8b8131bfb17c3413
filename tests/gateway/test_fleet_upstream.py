"""A fleet upstream in front of real `headstart engine` replicas (two, publishing KV events):
prefix routing and its header, KV events shared by two gateways, a WebSocket kept on one
replica, DNS endpoints, and real
kills: a refused replica's requests go to the survivor, a stream cut mid-way ends with an
error naming the replica, and a replica that comes back is used again."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from bench.fleet.replicas import EngineReplica, start_replicas, stop_replicas
from gateway.fleet.picker import rendezvous
from openai_api import ChatCompletionRequest
from tests.gateway.conftest import GatewayThread, scrape, wait_until

MODEL = "smollm2-135m-instruct"
SYSTEM = "You are the help desk of a bicycle shop. Answer in one short sentence. " * 12


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[EngineReplica]]:
    fleet = start_replicas(2, ["--num-kv-blocks", "512"])
    yield fleet
    stop_replicas(fleet)


def fleet_config(replicas: list[EngineReplica], **upstream) -> dict:
    return {"upstreams": {"fleet": {"kind": "openai",
                                    "endpoints": [r.endpoint() for r in replicas], **upstream}},
            "routes": [{"name": "r", "models": ["*"], "upstream": "fleet", "timeout_s": 60}]}


def ask(base_url: str, question: str, system: str = SYSTEM, **kwargs) -> tuple[str, int]:
    """(x-headstart-endpoint, cached prompt tokens) of one short answer."""
    client = OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=2, temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        **kwargs)
    answer = raw.parse()
    return raw.headers["x-headstart-endpoint"], answer.usage.prompt_tokens_details.cached_tokens


def endpoint_sample(base_url: str, name: str, endpoint: str, extra: str = "") -> float:
    labels = f'endpoint="{endpoint}"{extra},upstream="fleet"'
    return scrape(base_url, f"headstart_endpoint_{name}{{{labels}}}", default=0.0)


def test_prefix_routing_keeps_a_shared_prompt_on_one_replica(replicas, start_gateway) -> None:
    base = start_gateway(fleet_config(replicas))
    first, cached = ask(base, "Do you sell helmets?")
    assert first in {r.url for r in replicas} and cached == 0
    for question in ("Do you fix brakes?", "When do you open?", "Do you rent bikes?"):
        endpoint, cached = ask(base, question)
        assert endpoint == first and cached >= 160  # the system prompt's blocks
    assert endpoint_sample(base, "requests_total", first, ',outcome="ok"') == 4
    assert endpoint_sample(base, "picks_total", first, ',reason="prefix"') == 3
    assert endpoint_sample(base, "healthy", first) == 1


def test_kv_events_tell_a_second_gateway_where_a_prefix_lives(replicas) -> None:
    one = GatewayThread(fleet_config(replicas)).start()
    two = GatewayThread(fleet_config(replicas)).start()
    try:
        system = "You answer questions about tide tables for sailors, briefly. " * 10
        endpoint, _ = ask(one.base_url, "When is high tide?", system)
        locator = two.app.state.upstreams["fleet"].picker.locator
        prompt = two.app.state.upstreams["fleet"].prompts.keys
        probe = ChatCompletionRequest.model_validate({"model": MODEL, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "Low tide?"}]})
        keys, _ = prompt(probe)
        # gateway two never sent this prompt: only the replica's events can tell it
        assert wait_until(lambda: locator.matches(keys).get(endpoint, 0) >= 6, 10)
        assert set(locator.matches(keys)) == {endpoint}
        assert ask(two.base_url, "Low tide?", system)[0] == endpoint
        assert endpoint_sample(two.base_url, "picks_total", endpoint, ',reason="prefix"') == 1
        assert endpoint_sample(two.base_url, "kv_events_total", endpoint) >= 1
    finally:
        one.stop()
        two.stop()


def test_one_websocket_is_one_session_on_one_replica(replicas, start_gateway) -> None:
    base = start_gateway(fleet_config(replicas, balance="session"))
    used = set()
    with connect(base.replace("http://", "ws://") + "/v1/ws") as ws:
        session = json.loads(ws.recv())["session_id"]
        for topic in ("bread", "tides", "chess"):  # unrelated prompts: nothing shared
            ws.send(json.dumps({"model": MODEL, "max_tokens": 2, "messages": [
                {"role": "user", "content": f"One word about {topic}?"}]}))
            while (message := json.loads(ws.recv())).get("type") != "done":
                assert message.get("type") != "error", message
            used.add(message["headers"]["x-headstart-endpoint"])
    assert used == {rendezvous(session, sorted(r.url for r in replicas))}


def test_dns_endpoints_use_the_addresses_that_answer(replicas, start_gateway) -> None:
    port = replicas[0].port
    base = start_gateway({"upstreams": {"fleet": {"kind": "openai", "balance": "round_robin",
                                                  "endpoints": [f"dns+http://localhost:{port}/v1"]}},
                          "routes": [{"name": "r", "models": ["*"], "upstream": "fleet"}]})
    for _ in range(3):  # localhost may also be ::1, where nothing listens: probed down
        assert ask(base, "Hello?")[0] == f"http://127.0.0.1:{port}/v1"


def test_a_killed_replica_loses_no_request_and_is_used_again_once_back(replicas) -> None:
    """Health probes rarely here (60 s): the refused connection alone moves the request."""
    gateway = GatewayThread(fleet_config(replicas, balance="round_robin",
                                         health_interval_s=60)).start()
    victim, survivor = replicas
    try:
        victim.kill()
        for i in range(4):  # round robin would send every other request to the dead one
            assert ask(gateway.base_url, f"Question {i}?")[0] == survivor.url
        assert endpoint_sample(gateway.base_url, "errors_total", victim.url,
                               ',reason="connect"') == 1
        assert endpoint_sample(gateway.base_url, "healthy", victim.url) == 0
    finally:
        gateway.stop()
        if not victim.running:
            victim.start()
    gateway = GatewayThread(fleet_config(replicas, balance="round_robin",
                                         health_interval_s=0.5)).start()
    try:
        used = {ask(gateway.base_url, f"Again {i}?")[0] for i in range(4)}
        assert used == {victim.url, survivor.url}
    finally:
        gateway.stop()


def test_a_stream_cut_mid_answer_ends_with_an_error_naming_the_replica(replicas) -> None:
    gateway = GatewayThread(fleet_config(replicas, balance="round_robin",
                                         health_interval_s=0.5)).start()
    client = OpenAI(base_url=gateway.base_url + "/v1", api_key="none", max_retries=0)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, stream=True, max_tokens=4000, temperature=0,
            messages=[{"role": "user", "content": "Count from one to a thousand in words."}],
            extra_body={"ignore_eos": True})
        endpoint = raw.headers["x-headstart-endpoint"]
        victim = next(r for r in replicas if r.url == endpoint)
        stream = raw.parse()
        with pytest.raises(openai.APIError) as cut:
            for n, _ in enumerate(stream):
                if n == 3:
                    victim.kill()
        assert f"replica {endpoint} stopped mid-answer" in str(cut.value)
        assert endpoint_sample(gateway.base_url, "errors_total", endpoint,
                               ',reason="stream_cut"') == 1
        # probed down within a second: new requests go to the survivor at once
        assert wait_until(lambda: endpoint_sample(gateway.base_url, "healthy", endpoint) == 0, 5)
        assert ask(gateway.base_url, "Still there?")[0] != endpoint
    finally:
        gateway.stop()
        for replica in replicas:
            if not replica.running:
                replica.start()
    assert httpx.get(victim.server.base_url + "/health").status_code == 200
