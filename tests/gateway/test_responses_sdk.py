"""The official `openai` SDK's Responses API against the gateway's embedded engine and,
through a `kind: openai` upstream, `headstart engine` (real HTTP on loopback, the real
model): `responses.create` with a string, items and instructions, streamed events, the
`responses.stream` helper, `responses.parse`, function tools with a tool-result turn on
`previous_response_id`, and the stored response read back, listed and deleted."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

MODELS = ["smollm2-135m-instruct", "remote"]
SHORT = "Say just: one two three"  # answered in a few tokens, greedy
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False},
           "strict": True}
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta"]
CLOSING_EVENTS = ["response.output_text.done", "response.content_part.done",
                  "response.output_item.done", "response.completed"]


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


def create(client, model: str, **fields):
    fields.setdefault("input", SHORT)
    fields.setdefault("max_output_tokens", 24)
    return client.responses.create(model=model, temperature=0, **fields)


def ask_weather(client, model: str, **fields):
    return create(client, model, input="What is the weather in Paris?", tools=[WEATHER],
                  tool_choice="required", max_output_tokens=40, **fields)


@pytest.mark.parametrize("model", [*MODELS, "litellm"])
def test_a_string_input_gets_a_completed_response(client, model):
    r = create(client, model)
    assert (r.object, r.status, r.model, r.error) == ("response", "completed", model, None)
    (message,) = r.output
    assert (message.type, message.role, message.status) == ("message", "assistant", "completed")
    assert message.id.startswith("msg_") and r.id.startswith("resp_")
    assert r.output_text and r.output_text == message.content[0].text
    usage = r.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens > usage.output_tokens


@pytest.mark.parametrize("model, upstream", [(MODELS[0], "local"), (MODELS[1], "remote")])
def test_the_answer_carries_the_chat_headers(client, model, upstream):
    raw = client.responses.with_raw_response.create(model=model, input=SHORT, temperature=0,
                                                    max_output_tokens=24)
    headers = raw.headers
    assert headers["x-request-id"].startswith("req-") and headers["x-cache"] == "bypass"
    assert headers["x-headstart-upstream"] == upstream
    assert "upstream;dur=" in headers["server-timing"] and "total;dur=" in headers["server-timing"]
    assert raw.parse().status == "completed"


def test_items_and_instructions_are_answered_and_echoed(client):
    r = create(client, MODELS[0], instructions="You answer in English.", input=[
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": SHORT}]}])
    assert r.status == "completed" and r.output_text
    assert r.instructions == "You answer in English."


@pytest.mark.parametrize("model", MODELS)
def test_a_stream_sends_the_typed_events_in_order(client, model):
    events = list(create(client, model, stream=True))
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 1
    assert kinds == TEXT_EVENTS + ["response.output_text.delta"] * (deltas - 1) + CLOSING_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == text == events[-4].text
    assert final.usage.output_tokens >= 1 and final.status == "completed"


def test_each_event_comes_on_its_own_event_line_and_no_done_marker(gateway):
    body = {"model": MODELS[0], "input": SHORT, "stream": True, "temperature": 0,
            "max_output_tokens": 24}
    with httpx.stream("POST", gateway.base_url + "/v1/responses", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        frames = r.read().decode().strip().split("\n\n")
    for frame in frames:
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]
    assert "[DONE]" not in frames[-1]


def test_the_stream_helper_assembles_the_final_response(client):
    with client.responses.stream(model=MODELS[0], input=SHORT, temperature=0,
                                 max_output_tokens=24) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(deltas)


@pytest.mark.parametrize("model", MODELS)
def test_parse_returns_the_pydantic_object(client, model):
    r = client.responses.parse(model=model, input="Invent a person.", text_format=Person,
                               temperature=0, max_output_tokens=60)
    assert r.status == "completed" and isinstance(r.output_parsed, Person)
    assert r.text.format.type == "json_schema" and r.text.format.name == "Person"


@pytest.mark.parametrize("model", MODELS)
def test_a_function_call_then_its_output_on_the_chain_gets_a_final_answer(client, model):
    first = ask_weather(client, model)
    (call,) = first.output
    assert (call.type, call.name, call.status) == ("function_call", "get_weather", "completed")
    assert call.id.startswith("fc_") and call.call_id
    assert set(json.loads(call.arguments)) == {"city"}
    final = create(client, model, previous_response_id=first.id, tools=[WEATHER],
                   max_output_tokens=40, input=[{"type": "function_call_output",
                                                 "call_id": call.call_id,
                                                 "output": "21 C and sunny"}])
    assert final.status in ("completed", "incomplete") and final.output[0].type == "message"
    assert final.output_text and final.previous_response_id == first.id


def test_a_chains_turns_hit_the_engines_prefix_cache(client):
    first = create(client, MODELS[0], input="Name a colour.", max_output_tokens=8)
    second = create(client, MODELS[0], previous_response_id=first.id, input="Another one?",
                    max_output_tokens=8)
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= 16  # at least one KV block


def test_a_streamed_function_call_sends_its_argument_events(client):
    events = list(ask_weather(client, MODELS[0], stream=True))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.name == "get_weather" and set(json.loads(done.arguments)) == {"city"}
    assert kinds[-2:] == ["response.output_item.done", "response.completed"]
    assert events[-1].response.output[0].arguments == done.arguments


@pytest.mark.parametrize("model", MODELS)
def test_a_stored_response_is_read_listed_and_deleted(client, model):
    first = create(client, model, input="Name a colour.", max_output_tokens=8)
    second = create(client, model, previous_response_id=first.id, input="Another one?",
                    max_output_tokens=8)
    assert client.responses.retrieve(second.id) == second
    items = client.responses.input_items.list(second.id, order="asc")
    assert [(i.type, getattr(i, "role", None)) for i in items.data] == [
        ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert items.data[1].id == first.output[0].id and items.data[0].content[0].type == "input_text"
    newest = client.responses.input_items.list(second.id, limit=1)
    assert (newest.data[0].content[0].text, newest.has_more) == ("Another one?", True)
    page = client.responses.input_items.list(second.id, order="asc", after=items.data[0].id)
    assert [i.id for i in page.data] == [i.id for i in items.data[1:]]
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        create(client, model, previous_response_id=second.id)


def test_store_false_keeps_nothing(client):
    r = create(client, MODELS[0], store=False)
    assert r.store is False and r.status == "completed"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_a_route_in_the_path_serves_responses(gateway):
    client = openai.OpenAI(base_url=gateway.base_url + "/r/remote/v1", api_key="x",
                           max_retries=0)
    r = create(client, "anything-the-route-serves")
    assert r.status == "completed" and r.model == "anything-the-route-serves"
    assert client.responses.retrieve(r.id).id == r.id


@pytest.mark.parametrize("fields, status, param", [
    ({"previous_response_id": "not-a-response"}, 400, "previous_response_id"),
    ({"previous_response_id": "resp_0123456789abcdef"}, 404, "previous_response_id"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                {"type": "image_generation_call", "id": "ig_1"}]}, 400, "input[2].type"),
    ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
    ({"max_output_tokens": 0}, 400, "max_output_tokens"),
])
def test_bad_requests_are_refused_naming_the_parameter(client, fields, status, param):
    with pytest.raises(openai.APIStatusError) as info:
        create(client, MODELS[0], **fields)
    assert (info.value.status_code, info.value.body["param"]) == (status, param)


def test_an_unknown_model_is_a_404_like_chat(client):
    with pytest.raises(openai.NotFoundError) as info:
        create(client, "no-such-model")
    assert info.value.body["param"] == "model"
