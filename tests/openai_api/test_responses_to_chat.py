"""openai_api/responses_to_chat.py: a Responses API request as the chat request that
answers it."""

from __future__ import annotations

import pytest

from openai_api import APIError, ChatMessage, FunctionCall, ToolCall
from openai_api.responses import ResponsesRequest
from openai_api.responses_items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputText,
    MessageItem,
)
from openai_api.responses_to_chat import chat_messages, chat_request

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
           "strict": True}


def request(**fields) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})


def test_instructions_come_first_as_a_system_message():
    chat = chat_request(request(instructions="Be brief."), request().input_items())
    assert chat.messages == [ChatMessage(role="system", content="Be brief."),
                             ChatMessage(role="user", content="hi")]


def test_a_call_joins_the_assistant_turn_it_follows_and_its_output_is_a_tool_message():
    items = [MessageItem(role="user", content="Weather in Paris and Rome?"),
             MessageItem(role="assistant", content="Let me look."),
             FunctionCallItem(call_id="call_1", name="get_weather", arguments='{"city":"Paris"}'),
             FunctionCallItem(call_id="call_2", name="get_weather", arguments='{"city":"Rome"}'),
             FunctionCallOutputItem(call_id="call_1", output="21 C"),
             FunctionCallOutputItem(call_id="call_2", output=[InputText(text="18 C")])]
    calls = [ToolCall(id="call_1", function=FunctionCall(name="get_weather",
                                                         arguments='{"city":"Paris"}')),
             ToolCall(id="call_2", function=FunctionCall(name="get_weather",
                                                         arguments='{"city":"Rome"}'))]
    assert chat_messages(items) == [
        ChatMessage(role="user", content="Weather in Paris and Rome?"),
        ChatMessage(role="assistant", content="Let me look.", tool_calls=calls),
        ChatMessage(role="tool", tool_call_id="call_1", content="21 C"),
        ChatMessage(role="tool", tool_call_id="call_2", content="18 C")]


def test_a_call_after_a_tool_result_starts_a_new_assistant_turn():
    items = [FunctionCallItem(call_id="call_1", name="f", arguments="{}"),
             FunctionCallOutputItem(call_id="call_1", output="1"),
             FunctionCallItem(call_id="call_2", name="f", arguments="{}")]
    roles = [(m.role, len(m.tool_calls or ())) for m in chat_messages(items)]
    assert roles == [("assistant", 1), ("tool", 0), ("assistant", 1)]


def test_several_text_parts_stay_parts():
    item = MessageItem(role="user", content=[InputText(text="a"), InputText(text="b")])
    assert chat_messages([item])[0].content == [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]


def test_tools_choice_format_and_sampling_map_to_their_chat_fields():
    chat = chat_request(request(
        tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False, max_output_tokens=20, temperature=0, top_p=0.5, seed=3,
        stream=True, text={"format": {"type": "json_schema", "name": "person", "strict": True,
                                      "schema": {"type": "object"}}}),
        request().input_items())
    assert chat.tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": WEATHER["parameters"], "strict": True}}]
    assert chat.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert chat.response_format == {"type": "json_schema", "json_schema": {
        "name": "person", "schema": {"type": "object"}, "strict": True}}
    assert (chat.max_tokens, chat.temperature, chat.top_p, chat.seed, chat.stream) == \
        (20, 0, 0.5, 3, True)
    assert chat.model_extra["parallel_tool_calls"] is False


@pytest.mark.parametrize("text, expected", [({"format": {"type": "text"}}, None),
                                            ({"format": {"type": "json_object"}},
                                             {"type": "json_object"}),
                                            ({"verbosity": "low"}, None)])
def test_text_formats_without_a_schema(text, expected):
    assert chat_request(request(text=text), request().input_items()).response_format == expected


def test_nothing_to_answer_is_a_400_naming_input():
    with pytest.raises(APIError) as info:
        chat_request(request(input=[]), [])
    assert (info.value.status, info.value.param) == (400, "input")
