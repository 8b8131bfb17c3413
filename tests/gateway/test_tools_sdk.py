"""The official `openai` SDK's documented usage of tools and structured outputs, against
the gateway's embedded engine and, through a `kind: openai` upstream, `headstart engine`
(real HTTP on loopback, the real model): `chat.completions.parse` with a pydantic model,
`tools` under every `tool_choice`, streamed calls, and a tool-result turn."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel, Field

MODELS = ["smollm2-135m-instruct", "remote"]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: str = Field(max_length=20)
    unit: str = Field(pattern="^(celsius|fahrenheit)$")


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


TOOLS = [openai.pydantic_function_tool(GetWeather, name="get_weather")]


def ask(client, model: str, **fields):
    fields.setdefault("messages", ASK)
    fields.setdefault("max_tokens", 60)
    return client.chat.completions.create(model=model, temperature=0, **fields)


@pytest.mark.parametrize("model", MODELS)
def test_parse_returns_the_pydantic_object(client, model):
    r = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Invent a person."}],
        response_format=Person, temperature=0, max_tokens=60)
    person = r.choices[0].message.parsed
    assert r.choices[0].finish_reason == "stop" and isinstance(person, Person)
    assert Person.model_validate_json(r.choices[0].message.content) == person


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_weather"}}])
def test_a_forced_call_parses_into_its_arguments(client, model, choice):
    r = client.chat.completions.parse(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                                      temperature=0, max_tokens=60)
    out = r.choices[0]
    assert out.finish_reason == "tool_calls"
    call = out.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert isinstance(call.function.parsed_arguments, GetWeather)


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_are_answered(client, choice):
    out = ask(client, MODELS[0], tools=TOOLS, tool_choice=choice, max_tokens=8).choices[0]
    assert out.finish_reason in ("stop", "length", "tool_calls")
    assert out.message.content or out.message.tool_calls


def test_the_sdk_stream_helper_assembles_a_streamed_call(client):
    with client.chat.completions.stream(model=MODELS[0], messages=ASK, tools=TOOLS,
                                        tool_choice="required", temperature=0,
                                        max_tokens=60) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds
    assert kinds.index("tool_calls.function.arguments.done") > kinds.index(
        "tool_calls.function.arguments.delta")
    call = final.choices[0].message.tool_calls[0]
    assert isinstance(call.function.parsed_arguments, GetWeather)
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("model", MODELS)
def test_a_tool_result_turn_gets_a_final_answer(client, model):
    first = ask(client, model, tools=TOOLS, tool_choice="required").choices[0].message
    call = first.tool_calls[0]
    turns = [*ASK, first.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"celsius": 21})}]
    final = ask(client, model, messages=turns, tools=TOOLS, tool_choice="none").choices[0]
    assert final.finish_reason in ("stop", "length") and final.message.content


@pytest.mark.parametrize("model", MODELS)
def test_an_unknown_function_in_tool_choice_is_a_400(client, model):
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, model, tools=TOOLS, tool_choice={"type": "function",
                                                      "function": {"name": "nope"}})
    assert info.value.body["param"] == "tool_choice"
