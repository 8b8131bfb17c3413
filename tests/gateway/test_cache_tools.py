"""Tool calls and structured outputs through a caching route, as the `openai` SDK sends
them (in front of `headstart engine`): a forced call's answer is kept whole by the exact
cache; the semantic cache takes tools only where the route allows them, and the headers
say why it skipped."""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import GatewayThread
from tests.gateway.test_cache_gateway import cache_config

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def gw(engine_server):
    config = cache_config(engine_server.base_url)
    config["routes"].append({"name": "agents", "models": ["agents"], "upstream": "remote",
                             "cache": {"exact": {"enabled": True},
                                       "semantic": {"enabled": True, "allow_tools": True}}})
    server = GatewayThread(config).start()
    yield server
    server.stop()


def create(gw, model: str, **fields):
    client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key="x", max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=model, messages=ASK, temperature=0, max_tokens=40, **fields)


def test_a_forced_call_is_kept_by_the_exact_cache_and_served_whole(gw):
    fields = {"tools": [WEATHER], "tool_choice": "required"}
    first = create(gw, "faq", **fields)
    again = create(gw, "faq", **fields)
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "exact")
    stored, served = (r.parse().choices[0] for r in (first, again))
    assert served.finish_reason == stored.finish_reason == "tool_calls"
    assert served.message.tool_calls[0].function == stored.message.tool_calls[0].function
    assert create(gw, "faq", tools=[WEATHER]).headers["x-cache"] != "exact"  # auto: another key


def test_a_route_without_allow_tools_skips_the_semantic_lookup_and_says_so(gw):
    raw = create(gw, "faq", tools=[WEATHER], tool_choice="none", seed=7)
    assert (raw.headers["x-cache"], raw.headers["x-cache-bypass-reason"]) == (
        "miss", "semantic:tools")


def test_a_route_with_allow_tools_looks_up_requests_with_tools(gw):
    raw = create(gw, "agents", tools=[WEATHER], tool_choice="none", seed=8)
    assert raw.headers["x-cache"] == "miss" and "x-cache-bypass-reason" not in raw.headers


def test_a_schema_answer_is_kept_under_its_schema(gw):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    first, again = (create(gw, "faq", response_format=fmt) for _ in range(2))
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "exact")
    other = {"type": "json_schema", "json_schema": {"name": "place", "schema": {
        **schema, "properties": {"city": {"type": "string", "maxLength": 10}}}}}
    assert create(gw, "faq", response_format=other).headers["x-cache"] == "miss"


def test_a_route_can_keep_tool_calls_out_of_the_exact_cache(engine_server):
    config = cache_config(engine_server.base_url)
    config["routes"].append({"name": "no-tools", "models": ["no-tools"], "upstream": "remote",
                             "cache": {"exact": {"enabled": True, "allow_tools": False}}})
    server = GatewayThread(config).start()
    try:
        fields = {"tools": [WEATHER], "tool_choice": "required"}
        first, again = (create(server, "no-tools", **fields) for _ in range(2))
        assert [(r.headers["x-cache"], r.headers["x-cache-bypass-reason"])
                for r in (first, again)] == [("bypass", "exact:tools")] * 2
        assert again.parse().choices[0].finish_reason == "tool_calls"
    finally:
        server.stop()
