"""openai_api/responses.py and responses_items.py: a Responses API request read into typed
fields and items, and each bad one refused with a 400 naming its place."""

from __future__ import annotations

import json

import pytest

from openai_api import APIError, parse_model
from openai_api.responses import ResponsesRequest
from openai_api.responses_items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputText,
    MessageItem,
    OutputText,
    with_ids,
)


def read(**fields) -> ResponsesRequest:
    return parse_model(json.dumps({"model": "m", "input": "hi", **fields}).encode(),
                       ResponsesRequest)


def refused(**fields) -> APIError:
    with pytest.raises(APIError) as info:
        read(**fields).input_items()
    assert info.value.status == 400
    return info.value


def test_a_string_input_is_one_user_message():
    assert read().input_items() == [MessageItem(role="user", content="hi")]


def test_items_are_read_by_type_and_a_typeless_one_with_a_role_is_a_message():
    items = read(input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "It is 21 C.", "annotations": []}]},
    ]).input_items()
    assert [type(item) for item in items] == [MessageItem, FunctionCallItem,
                                             FunctionCallOutputItem, MessageItem]
    assert items[3].content == [OutputText(text="It is 21 C.")]
    assert items[2].text() == "21 C"


def test_an_unsupported_item_type_is_named_by_its_place():
    err = refused(input=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                         {"type": "web_search_call", "id": "ws_1"}])
    assert err.param == "input[2].type" and "web_search_call" in err.message


def test_an_unsupported_content_part_is_named_by_its_place():
    err = refused(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "http://localhost/x.png"}]}])
    assert err.param == "input[0].content[1].type"


def test_a_missing_field_of_an_item_is_named():
    err = refused(input=[{"role": "user", "content": "a"},
                         {"type": "function_call_output", "output": "21 C"}])
    assert (err.param, err.code) == ("input[1].call_id", "missing_required_parameter")


def test_an_item_that_is_not_an_object_is_named():
    err = refused(input=["hello"])
    assert (err.param, err.code) == ("input[0]", "invalid_type")


@pytest.mark.parametrize("bad", ["resp 1", "chatcmpl-123", "resp_", "resp_abc/def"])
def test_a_malformed_previous_response_id_is_a_400_naming_it(bad):
    with pytest.raises(APIError) as info:
        read(previous_response_id=bad)
    assert (info.value.status, info.value.param) == (400, "previous_response_id")


def test_a_hosted_tool_is_refused_by_its_place():
    with pytest.raises(APIError) as info:
        read(tools=[{"type": "function", "name": "f"}, {"type": "web_search"}])
    assert info.value.param == "tools[1].type"


@pytest.mark.parametrize("choice", ["any", {"type": "function"}, {"type": "web_search"}])
def test_a_bad_tool_choice_is_refused(choice):
    with pytest.raises(APIError) as info:
        read(tool_choice=choice)
    assert info.value.param == "tool_choice"


def test_a_json_schema_format_needs_its_name_and_schema():
    with pytest.raises(APIError) as info:
        read(text={"format": {"type": "json_schema", "name": "person"}})
    assert info.value.param == "text.format"


def test_a_conversation_is_refused_rather_than_ignored():
    with pytest.raises(APIError) as info:
        read(conversation="conv_1")
    assert info.value.param == "conversation"


def test_unknown_fields_are_accepted():
    assert read(include=["message.output_text.logprobs"], truncation="disabled").store is True


def test_stored_items_get_ids_statuses_and_content_parts():
    user, call = with_ids([MessageItem(role="user", content="hi"),
                           FunctionCallItem(call_id="call_1", name="f", arguments="{}")])
    assert user.id.startswith("msg_") and user.status == "completed"
    assert user.content == [InputText(text="hi")]
    assert call.id.startswith("fc_") and call.status == "completed"
    kept = MessageItem(id="msg_mine", role="assistant", content="ok", status="incomplete")
    (again,) = with_ids([kept])
    assert (again.id, again.status, again.content) == ("msg_mine", "incomplete",
                                                       [OutputText(text="ok")])
