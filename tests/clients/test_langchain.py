"""LangChain 1.x (`langchain-openai`'s ChatOpenAI) against the gateway: forced tool calls
with `bind_tools(..., tool_choice="required")`, streamed too, and
`with_structured_output(method="json_schema")`."""

from __future__ import annotations

from langchain_openai import ChatOpenAI

from tests.clients.conftest import MODEL
from tests.clients.models import GetWeather, Person


def chat(gateway_url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=gateway_url, api_key="unused", temperature=0,
                      max_tokens=80, max_retries=0)


def test_bind_tools_required_returns_a_valid_call(gateway_url):
    llm = chat(gateway_url).bind_tools([GetWeather], tool_choice="required")
    message = llm.invoke("What is the weather in Paris?")
    (call,) = message.tool_calls
    assert call["name"] == "GetWeather" and call["id"].startswith("call_")
    GetWeather.model_validate(call["args"])


def test_a_streamed_bind_tools_call_folds_into_one_call(gateway_url):
    llm = chat(gateway_url).bind_tools([GetWeather], tool_choice="required")
    pieces = list(llm.stream("What is the weather in Rome?"))
    folded = pieces[0]
    for piece in pieces[1:]:
        folded += piece
    assert len(pieces) > 3
    (call,) = folded.tool_calls
    assert call["name"] == "GetWeather"
    GetWeather.model_validate(call["args"])


def test_with_structured_output_json_schema_returns_the_model(gateway_url):
    extract = chat(gateway_url).with_structured_output(Person, method="json_schema")
    person = extract.invoke("Invent a person.")
    assert isinstance(person, Person)
