"""openai_api/responses_from_chat.py: chat chunks in, the Responses API's stream events and
finished response out; and a stored response's input items paged as OpenAI lists them."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from openai_api import APIError, ChatCompletionChunk, ChunkChoice, DeltaMessage, Usage
from openai_api.responses import ResponsesRequest
from openai_api.responses_from_chat import ResponseBuilder
from openai_api.responses_items import MessageItem, with_ids
from openai_api.responses_objects import InputItemList, ResponseObject

SDK_EVENT = TypeAdapter(ResponseStreamEvent)


def builder(**fields) -> ResponseBuilder:
    request = ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})
    return ResponseBuilder(ResponseObject.started(request, "resp_1", created_at=7))


def chunk(content=None, calls=None, finish=None, usage=None) -> ChatCompletionChunk:
    choices = [] if usage else [ChunkChoice(delta=DeltaMessage(content=content, tool_calls=calls),
                                            finish_reason=finish)]
    return ChatCompletionChunk(id="chatcmpl-1", model="m", choices=choices, usage=usage)


def run(b: ResponseBuilder, *chunks: ChatCompletionChunk) -> list:
    events = b.start()
    for c in chunks:
        events += b.add(c)
    return events + b.finish()


def test_text_streams_into_one_message_and_the_sdk_parses_every_event():
    b = builder()
    events = run(b, chunk("Hel"), chunk("lo"), chunk(finish="stop"),
                 chunk(usage=Usage.of(10, 2, 8)))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for event in events:  # the official SDK's own types accept each one as sent
        SDK_EVENT.validate_python(json.loads(event.model_dump_json()))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = Response.model_validate(json.loads(b.response.model_dump_json()))
    assert (final.status, final.output_text) == ("completed", "Hello")
    assert final.usage.input_tokens_details.cached_tokens == 8
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 2)


def test_each_tool_call_is_a_function_call_item_whose_arguments_stream():
    b = builder()
    first = {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}
    events = run(b, chunk(calls=[first]),
                 chunk(calls=[{"index": 0, "function": {"arguments": '{"city":'}}]),
                 chunk(calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
                 chunk(calls=[{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "get_time", "arguments": "{}"}}]),
                 chunk(finish="tool_calls"))
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    for event in events:
        SDK_EVENT.validate_python(json.loads(event.model_dump_json()))
    paris, clock = b.response.output
    assert (paris.call_id, paris.name, paris.arguments) == ("call_a", "get_weather",
                                                            '{"city":"Paris"}')
    assert (clock.call_id, clock.name, clock.status) == ("call_b", "get_time", "completed")
    assert events[5].arguments == '{"city":"Paris"}' and events[9].output_index == 1


def test_text_then_a_call_closes_the_message_first():
    b = builder()
    run(b, chunk("Let me look."), chunk(calls=[{"index": 0, "id": "call_a",
                                                "function": {"name": "f", "arguments": "{}"}}]),
        chunk(finish="tool_calls"))
    assert [item.type for item in b.response.output] == ["message", "function_call"]


def test_a_length_stop_is_an_incomplete_response():
    b = builder(max_output_tokens=2)
    events = run(b, chunk("Hel"), chunk(finish="length"))
    assert events[-1].type == "response.incomplete"
    response = b.response
    assert (response.status, response.incomplete_details.reason) == ("incomplete",
                                                                     "max_output_tokens")
    assert response.output[0].status == "incomplete" and response.completed_at is None


def test_an_empty_answer_is_one_empty_message():
    b = builder()
    events = run(b, chunk(finish="stop"))
    assert b.response.output_text() == "" and len(b.response.output) == 1
    assert "response.output_text.done" in [e.type for e in events]


def test_a_failure_mid_stream_ends_with_response_failed():
    b = builder()
    b.start()
    b.add(chunk("Hel"))
    (event,) = b.fail(APIError(504, "upstream 'u': timed out", code="upstream_timeout"))
    assert event.type == "response.failed"
    assert (event.response.status, event.response.error.code) == ("failed", "upstream_timeout")


def test_the_request_settings_are_echoed():
    response = builder(instructions="Be brief.", temperature=0, tool_choice="required",
                       tools=[{"type": "function", "name": "f"}], metadata={"k": "v"},
                       text={"format": {"type": "json_object"}}).response
    assert (response.instructions, response.temperature, response.tool_choice,
            response.metadata) == ("Be brief.", 0, "required", {"k": "v"})
    assert response.tools == [{"type": "function", "name": "f"}]
    assert response.text == {"format": {"type": "json_object"}}


ITEMS = with_ids([MessageItem(role="user", content=str(i)) for i in range(5)])


@pytest.mark.parametrize("order, limit, after, texts, more", [
    ("desc", 20, None, ["4", "3", "2", "1", "0"], False),
    ("asc", 2, None, ["0", "1"], True),
    ("asc", 2, ITEMS[1].id, ["2", "3"], True),
    ("desc", 2, ITEMS[1].id, ["0"], False),
])
def test_input_items_page_in_order_after_an_id(order, limit, after, texts, more):
    page = InputItemList.page(ITEMS, order=order, limit=limit, after=after)
    assert [item.texts()[0] for item in page.data] == texts and page.has_more is more
    assert (page.first_id, page.last_id) == (page.data[0].id, page.data[-1].id)


def test_paging_after_an_unknown_item_is_a_400_naming_after():
    with pytest.raises(APIError) as info:
        InputItemList.page(ITEMS, order="asc", limit=2, after="msg_nope")
    assert (info.value.status, info.value.param) == (400, "after")
