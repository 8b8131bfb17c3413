"""The official `openai` SDK 3.x (the 2.x line: tests/gateway/test_tools_sdk.py) against the
gateway: `chat.completions.parse` with a pydantic model, a forced call parsed into its
arguments, the stream helper assembling a streamed call, and a tool-result turn."""

from __future__ import annotations

import openai

from tests.clients.conftest import MODEL
from tests.clients.models import WEATHER_REPORT, GetWeather, Person

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [openai.pydantic_function_tool(GetWeather, name="get_weather")]


def client(gateway_url: str) -> openai.OpenAI:
    assert openai.__version__.startswith("3.")
    return openai.OpenAI(base_url=gateway_url, api_key="unused", max_retries=0)


def test_parse_returns_the_pydantic_object(gateway_url):
    r = client(gateway_url).chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Invent a person."}],
        response_format=Person, temperature=0, max_tokens=60)
    assert isinstance(r.choices[0].message.parsed, Person)


def test_a_streamed_forced_call_parses_and_its_result_gets_an_answer(gateway_url):
    sdk = client(gateway_url)
    with sdk.chat.completions.stream(model=MODEL, messages=ASK, tools=TOOLS,
                                     tool_choice="required", temperature=0,
                                     max_tokens=60) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    call = message.tool_calls[0]
    assert final.choices[0].finish_reason == "tool_calls"
    assert isinstance(call.function.parsed_arguments, GetWeather)
    sent = {"id": call.id, "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments}}
    turns = [*ASK, {"role": "assistant", "tool_calls": [sent]},
             {"role": "tool", "tool_call_id": call.id, "content": WEATHER_REPORT}]
    answer = sdk.chat.completions.create(model=MODEL, messages=turns, tools=TOOLS,
                                         temperature=0, max_tokens=40)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
