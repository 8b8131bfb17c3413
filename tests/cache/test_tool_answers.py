"""Requests with tools, a tool choice or a response format in the caches: the exact key
tells each apart, the semantic cache takes them only where the route allows tools
(`allow_tools`) and says why it skipped otherwise, and an answer's tool calls come back
as they were stored."""

from __future__ import annotations

from dataclasses import replace

from cache.keys import CacheRequest, exact_key
from cache.settings import CacheSettings

S = CacheSettings(route="r", exact_enabled=True, semantic_enabled=True, threshold=0.85)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CALL = {"content": "", "finish_reason": "tool_calls", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
PERSON = {"type": "json_schema", "json_schema": {"name": "p", "schema": {
    "type": "object", "properties": {"name": {"type": "string"}}}}}


def ask(text: str, **params) -> CacheRequest:
    return CacheRequest(route="r", model="m", messages=[{"role": "user", "content": text}],
                        params={"temperature": 0, **params})


def test_the_exact_key_tells_apart_tools_tool_choice_and_the_schema():
    other_tool = {"type": "function", "function": {**WEATHER["function"], "name": "weather"}}
    other_schema = {**PERSON, "json_schema": {**PERSON["json_schema"], "schema": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}}}}
    requests = [ask("Weather in Paris?"),
                ask("Weather in Paris?", tools=[WEATHER]),
                ask("Weather in Paris?", tools=[other_tool]),
                ask("Weather in Paris?", tools=[WEATHER], tool_choice="required"),
                ask("Weather in Paris?", tools=[WEATHER], tool_choice={
                    "type": "function", "function": {"name": "get_weather"}}),
                ask("Weather in Paris?", tools=[WEATHER], parallel_tool_calls=False),
                ask("Weather in Paris?", response_format=PERSON),
                ask("Weather in Paris?", response_format=other_schema),
                ask("Weather in Paris?", response_format={"type": "json_object"})]
    assert len({exact_key(r) for r in requests}) == len(requests)
    reordered = {"function": WEATHER["function"], "type": "function"}
    assert exact_key(ask("Weather in Paris?", tools=[reordered])) == exact_key(requests[1])


async def test_a_tool_call_answer_is_kept_exactly_and_served_back_whole(cache):
    request = ask("Weather in Paris?", tools=[WEATHER], tool_choice="required")
    assert await cache.store(request, CALL, S)
    found = await cache.lookup(request, S)
    assert found.status == "exact" and found.answer["tool_calls"] == CALL["tool_calls"]
    assert len(cache.semantic.index) == 0  # the semantic cache does not take tools here


async def test_the_semantic_cache_skips_tools_unless_the_route_allows_them_and_says_so(cache):
    found = await cache.lookup(ask("Weather in Paris?", tools=[WEATHER]), S)
    assert (found.status, found.skipped) == ("miss", "semantic:tools")
    only_semantic = replace(S, exact_enabled=False)
    found = await cache.lookup(ask("Weather in Paris?", tools=[WEATHER]), only_semantic)
    assert (found.status, found.skipped) == ("bypass", "tools")
    result_turn = CacheRequest(route="r", model="m", params={"temperature": 0}, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": CALL["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}])
    assert (await cache.lookup(result_turn, only_semantic)).skipped == "tools"


async def test_a_route_that_allows_tools_serves_a_rephrasing_the_stored_calls(cache):
    allowed = replace(S, allow_tools=True)
    assert await cache.store(ask("What is the weather in Paris?", tools=[WEATHER]), CALL,
                             allowed)
    found = await cache.lookup(ask("what's the weather in paris", tools=[WEATHER]), allowed)
    assert found.status == "semantic" and found.answer["tool_calls"] == CALL["tool_calls"]
    other_tools = ask("what's the weather in paris", tools=[WEATHER], tool_choice="required")
    assert (await cache.lookup(other_tools, allowed)).status == "miss"
