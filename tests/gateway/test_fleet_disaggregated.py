"""A fleet upstream with a prefill pool and a decode pool (gateway/upstreams/disaggregated.py)
in front of two real `headstart engine` processes, `--role prefill` and `--role decode`,
driven through the gateway with the official `openai` SDK; and its config checks."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import OpenAI

from bench.fleet.replicas import EngineReplica, stop_replicas
from gateway.config import ConfigError, GatewayConfig
from gateway.upstreams import build_upstream
from gateway.upstreams.disaggregated import DisaggregatedUpstream
from tests.gateway.conftest import scrape
from tests.support.processes import free_port

MODEL = "smollm2-135m-instruct"
STORY = ("The history of the bicycle began in the early nineteenth century with the "
         "draisine, a running machine without pedals. ")


@pytest.fixture(scope="module")
def pools() -> Iterator[tuple[EngineReplica, EngineReplica]]:
    """(prefill, decode): one engine each."""
    replicas = [EngineReplica(["--role", role, "--num-kv-blocks", "256"])
                for role in ("prefill", "decode")]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(EngineReplica.start, replicas))
        yield replicas[0], replicas[1]
    finally:
        stop_replicas(replicas)


def disaggregated(prefill: list, decode: list, **upstream) -> dict:
    return {"upstreams": {"fleet": {"kind": "openai", "endpoints": decode,
                                    "prefill_endpoints": prefill, **upstream}},
            "routes": [{"name": "r", "models": ["*"], "upstream": "fleet", "timeout_s": 60}]}


def conversation(topic: str) -> list[dict]:
    """A prompt of ~190 tokens whose first block is its own (`topic` leads it)."""
    return [{"role": "system", "content": f"{topic} You answer in plain prose."},
            {"role": "user", "content": f"{STORY * 7}Tell me more."}]


def requests(base: str, replica: EngineReplica, outcome: str) -> float:
    """The gateway's count of requests sent to `replica` with `outcome`."""
    labels = f'endpoint="{replica.url}",outcome="{outcome}",upstream="fleet"'
    return scrape(base, f"headstart_endpoint_requests_total{{{labels}}}")


def alone(decode: EngineReplica, messages: list[dict], **kwargs):
    """The decode engine's own answer, its prefix cache kept apart (`cache_salt`): what one
    engine doing both answers."""
    return OpenAI(base_url=decode.url, api_key="none", max_retries=0).chat.completions.create(
        model=MODEL, messages=messages, temperature=0, extra_body={"cache_salt": "alone"},
        **kwargs)


def test_a_request_is_read_by_a_prefill_replica_and_decoded_by_a_decode_one(
        pools, start_gateway) -> None:
    prefill, decode = pools
    base = start_gateway(disaggregated([prefill.endpoint()], [decode.endpoint()]))
    client = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    messages = conversation("Bicycles.")
    expected = alone(decode, messages, max_tokens=24)

    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=24, temperature=0)
    answer = raw.parse()
    assert answer.choices[0].message.content == expected.choices[0].message.content
    assert raw.headers["x-headstart-endpoint"] == decode.url
    prompt, cached = answer.usage.prompt_tokens, answer.usage.prompt_tokens_details.cached_tokens
    assert cached == prompt  # the decode replica read none of it: blocks and first token handed
    assert "kv_transfer_params" not in answer.model_extra
    assert requests(base, prefill, "ok") == requests(base, decode, "ok") == 1


def test_a_streamed_request_streams_from_the_decode_replica(pools, start_gateway) -> None:
    prefill, decode = pools
    base = start_gateway(disaggregated([prefill.endpoint()], [decode.endpoint()]))
    client = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    messages = conversation("Tandems.")
    expected = alone(decode, messages, max_tokens=20)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected.choices[0].message.content
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens


def test_without_a_prefill_replica_the_decode_one_reads_the_prompt(pools, start_gateway) -> None:
    _, decode = pools
    gone = f"http://127.0.0.1:{free_port()}/v1"
    base = start_gateway(disaggregated([gone], [decode.endpoint()]))
    messages = conversation("Unicycles.")
    expected = alone(decode, messages, max_tokens=12)
    answer = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=12, temperature=0)
    assert answer.choices[0].message.content == expected.choices[0].message.content
    assert answer.usage.prompt_tokens_details.cached_tokens == 0


def test_a_request_the_prefill_replica_refuses_is_a_client_error(pools, start_gateway) -> None:
    prefill, decode = pools
    base = start_gateway(disaggregated([prefill.endpoint()], [decode.endpoint()]))
    r = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi."}],
        "tool_choice": "required"})  # no tools offered
    assert r.status_code == 400, r.text
    assert requests(base, prefill, "rejected") == 1


# ---------------------------------------------------------------- configuration


def config(upstream: dict) -> GatewayConfig:
    return GatewayConfig.from_dict({"upstreams": {"fleet": upstream},
                                    "routes": [{"name": "r", "upstream": "fleet"}]}, "<test>")


def test_prefill_endpoints_make_a_disaggregated_upstream() -> None:
    up = config({"kind": "openai", "endpoints": ["http://d1:8001/v1"],
                 "prefill_endpoints": ["http://p1:8001/v1", "http://p2:8001/v1"]})
    fleet = build_upstream(up.upstreams["fleet"])
    assert isinstance(fleet, DisaggregatedUpstream)
    assert [s.url for s in fleet.prefill.specs] == ["http://p1:8001/v1", "http://p2:8001/v1"]
    assert [s.url for s in fleet.decode.specs] == ["http://d1:8001/v1"]
    assert fleet.prefill.metrics is fleet.decode.metrics is fleet.collector()


@pytest.mark.parametrize(("upstream", "message"), [
    ({"kind": "openai", "base_url": "http://e/v1", "prefill_endpoints": ["http://p/v1"]},
     "upstreams.fleet: prefill_endpoints need endpoints: the decode pool"),
    ({"kind": "openai", "endpoints": ["http://e/v1"], "prefill_endpoints": ["http://e/v1/"]},
     "upstreams.fleet: http://e/v1 is in both endpoints and prefill_endpoints"),
    ({"kind": "openai", "endpoints": ["http://e/v1"], "prefill_endpoints": ["tcp://p:1"]},
     "upstreams.fleet.prefill_endpoints: 'tcp://p:1' is not an http(s)://"),
])
def test_bad_prefill_pools_name_the_key(upstream: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(upstream)
    assert message in str(e.value)
