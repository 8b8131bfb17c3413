"""The Responses API (`/v1/responses`) from the libraries apps are built on, against the
gateway's embedded default: the `openai` 3.x SDK itself (create, the stream helper, parse,
a tool-result turn on `previous_response_id`, retrieve and delete), the Agents SDK's default
model (`OpenAIResponsesModel`) with a function tool, and LangChain's
`ChatOpenAI(use_responses_api=True)`, plain and with a tool."""

from __future__ import annotations

import json

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.items import ToolCallItem, ToolCallOutputItem
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from tests.clients.conftest import MODEL
from tests.clients.models import WEATHER_REPORT, GetWeather, Person, get_weather

SHORT = "Say just: one two three"  # answered in a few tokens, greedy
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {**GetWeather.model_json_schema(), "additionalProperties": False},
           "strict": True}


def sdk(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url, api_key="unused", max_retries=0)


def test_openai_3_creates_streams_and_parses(gateway_url):
    client = sdk(gateway_url)
    assert openai.__version__.startswith("3.")
    r = client.responses.create(model=MODEL, input=SHORT, temperature=0, max_output_tokens=24)
    assert r.status == "completed" and r.output_text
    with client.responses.stream(model=MODEL, input=SHORT, temperature=0,
                                 max_output_tokens=24) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) == r.output_text
    parsed = client.responses.parse(model=MODEL, input="Invent a person.", text_format=Person,
                                    temperature=0, max_output_tokens=60)
    assert isinstance(parsed.output_parsed, Person)


def test_openai_3_continues_a_tool_call_on_the_chain_then_deletes_it(gateway_url):
    client = sdk(gateway_url)
    first = client.responses.create(model=MODEL, input="What is the weather in Paris?",
                                    tools=[WEATHER], tool_choice="required", temperature=0,
                                    max_output_tokens=40)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    GetWeather.model_validate(json.loads(call.arguments))
    final = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER], temperature=0,
        max_output_tokens=40,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": WEATHER_REPORT}])
    assert final.output[0].type == "message" and final.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text
    listed = client.responses.input_items.list(final.id, order="asc").data
    assert [item.type for item in listed] == ["message", "function_call",
                                              "function_call_output"]
    client.responses.delete(final.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(final.id)


def test_the_agents_sdk_default_model_calls_a_tool_and_answers(gateway_url):
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    set_default_openai_client(openai.AsyncOpenAI(base_url=gateway_url, api_key="unused",
                                                 max_retries=0), use_for_tracing=False)
    set_default_openai_api("responses")
    agent = Agent(name="weather", instructions="Answer questions about the weather.",
                  tools=[function_tool(get_weather)], model=MODEL,
                  model_settings=ModelSettings(temperature=0, max_tokens=80,
                                               tool_choice="required"))
    result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    calls = [item for item in result.new_items if isinstance(item, ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert calls and calls[0].raw_item.type == "function_call"
    assert calls[0].raw_item.name == "get_weather"
    assert outputs and outputs[0].output == WEATHER_REPORT
    assert isinstance(result.final_output, str) and result.final_output
    assert result.last_response_id.startswith("resp_")


def responses_chat(gateway_url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=gateway_url, api_key="unused", temperature=0,
                      max_tokens=60, max_retries=0, use_responses_api=True)


def test_langchain_invokes_through_the_responses_api(gateway_url):
    message = responses_chat(gateway_url).invoke(SHORT)
    assert message.text and message.response_metadata["id"].startswith("resp_")
    assert message.usage_metadata["input_tokens"] > 0


def test_langchain_gets_a_tool_call_and_answers_its_result(gateway_url):
    llm = responses_chat(gateway_url).bind_tools([GetWeather], tool_choice="required")
    ask = HumanMessage("What is the weather in Paris?")
    called = llm.invoke([ask])
    (call,) = called.tool_calls
    assert call["name"] == "GetWeather"
    GetWeather.model_validate(call["args"])
    answer = responses_chat(gateway_url).bind_tools([GetWeather], tool_choice="none").invoke(
        [ask, called, ToolMessage(WEATHER_REPORT, tool_call_id=call["id"])])
    assert answer.text and not answer.tool_calls
