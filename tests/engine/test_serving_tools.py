"""Tool calls and structured outputs through `OpenAIEngine` (the path both servers take),
on the real model: every `tool_choice`, `parallel_tool_calls`, the streamed deltas, and the
400s that name the parameter."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.serving.answers import fold
from engine.serving.openai_engine import OpenAIEngine
from openai_api import APIError, ChatCompletionRequest

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                           "parameters": ADD}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}


@pytest.fixture(scope="module")
def served(smollm_bf16):
    engine = AsyncEngine(EngineConfig(kv_cache_memory_mb=64), loaded=tuple(smollm_bf16))
    yield OpenAIEngine(engine)
    asyncio.run(engine.shutdown())


def request(**fields) -> ChatCompletionRequest:
    fields.setdefault("messages", ASK)
    fields.setdefault("max_tokens", 60)
    return ChatCompletionRequest(model="m", temperature=0, **fields)


async def answer(served: OpenAIEngine, **fields):
    return await fold(served.stream(request(**fields)), "chat", "m")


async def chunks_of(served: OpenAIEngine, **fields) -> list:
    return [chunk async for chunk in served.stream(request(**fields))]


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "add"}}])
async def test_a_forced_call_is_valid_for_its_function(served, choice):
    out = (await answer(served, tools=TOOLS, tool_choice=choice)).choices[0]
    assert out.finish_reason == "tool_calls" and out.message.tool_calls
    for call in out.message.tool_calls:
        assert call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    if isinstance(choice, dict):
        assert [c.function.name for c in out.message.tool_calls] == ["add"]


async def test_without_parallel_calls_exactly_one_call_is_made(served):
    out = (await answer(served, tools=TOOLS, tool_choice="required",
                        parallel_tool_calls=False)).choices[0]
    assert out.finish_reason == "tool_calls" and len(out.message.tool_calls) == 1


async def test_a_streamed_call_sends_its_name_before_its_arguments(served):
    chunks = await chunks_of(served, tools=TOOLS, tool_choice="required", stream=True)
    deltas = [c.choices[0].delta.tool_calls for c in chunks
              if c.choices and c.choices[0].delta.tool_calls]
    head = deltas[0][0]
    assert head["id"].startswith("call_") and head["index"] == 0
    assert head["function"]["name"] in SCHEMAS and head["type"] == "function"
    pieces = [d[0]["function"]["arguments"] for d in deltas[1:]]
    assert len(pieces) > 3 and all("name" not in d[0]["function"] for d in deltas[1:])
    json.loads("".join(pieces))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls" and finishes.count(None) == len(finishes) - 1


async def test_auto_and_none_answer_in_text_here(served):
    for choice in ("auto", "none"):
        out = (await answer(served, tools=TOOLS, tool_choice=choice, max_tokens=8)).choices[0]
        assert out.message.tool_calls is None and out.message.content
        assert out.finish_reason in ("stop", "length")


async def test_a_tool_result_turn_is_answered(served):
    call = (await answer(served, tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "get_weather"}})).choices[0].message.tool_calls[0]
    turns = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "21 C and sunny"}]
    out = (await answer(served, messages=turns, tools=TOOLS, max_tokens=16)).choices[0]
    assert out.finish_reason in ("stop", "length", "tool_calls")
    assert out.message.content or out.message.tool_calls


async def test_json_schema_answers_follow_the_schema(served):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0}},
              "required": ["name", "age"], "additionalProperties": False}
    out = (await answer(served, messages=[{"role": "user", "content": "Invent a person."}],
                        response_format={"type": "json_schema",
                                         "json_schema": {"name": "person", "schema": schema,
                                                         "strict": True}})).choices[0]
    assert out.finish_reason == "stop"
    jsonschema.validate(json.loads(out.message.content), schema)


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True}}}}}],
      "tool_choice": "required"}, "tools[0].function.parameters.properties.ids.uniqueItems"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "tools[1].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"parallel_tool_calls": "yes", "tools": TOOLS}, "parallel_tool_calls"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}},
     "response_format.json_schema.schema.properties.a.not"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
])
async def test_bad_tools_and_formats_are_400s_naming_the_parameter(served, fields, param):
    with pytest.raises(APIError) as info:
        await chunks_of(served, **fields)
    assert info.value.status == 400 and info.value.param == param
