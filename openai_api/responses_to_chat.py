"""A Responses API request as the chat completion request that answers it.

The conversation is `instructions` (a system message), then the items of the chain the
request continues (`previous_response_id`: that response's input and output, as stored),
then the new input. Messages keep their role and text; a `function_call` becomes a tool
call on the assistant message it follows (a model's text and its calls are one chat turn,
parallel calls one message); a `function_call_output` a `tool` message. Function tools,
`tool_choice`, `text.format` (as `response_format`), `max_output_tokens` and the sampling
fields map one to one. Every upstream speaks chat completions, so this is how each of them
answers the Responses API.
"""

from __future__ import annotations

from typing import Any

from openai_api.errors import APIError
from openai_api.models import ChatCompletionRequest, ChatMessage, FunctionCall, ToolCall
from openai_api.responses import ResponsesRequest, TextFormat
from openai_api.responses_items import FunctionCallItem, FunctionCallOutputItem, Item

# fields that mean the same on both requests
_SAME = ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty",
         "parallel_tool_calls", "user", "cache_salt", "priority", "cache", "stream")


def chat_request(request: ResponsesRequest, conversation: list[Item]) -> ChatCompletionRequest:
    """The chat request for `request`, whose whole conversation (the chain's items, then
    the new input) is `conversation`."""
    messages = [ChatMessage(role="system", content=request.instructions)] \
        if request.instructions else []
    messages += chat_messages(conversation)
    if not messages:
        raise APIError(400, "Invalid value for 'input': there is nothing to answer; send at "
                       "least one input item", param="input", code="invalid_value")
    fields: dict[str, Any] = {name: getattr(request, name) for name in _SAME}
    fields["max_tokens"] = request.max_output_tokens
    if request.tools:
        fields["tools"] = [chat_tool(tool.model_dump(exclude_none=True)) for tool in request.tools]
    if request.tool_choice is not None:
        fields["tool_choice"] = chat_tool_choice(request.tool_choice)
    fields["response_format"] = response_format(request.text_format())
    return ChatCompletionRequest(model=request.model, messages=messages,
                                 **{k: v for k, v in fields.items() if v is not None})


def chat_messages(items: list[Item]) -> list[ChatMessage]:
    """Conversation items as chat messages, in order."""
    messages: list[ChatMessage] = []
    for item in items:
        if isinstance(item, FunctionCallItem):
            call = ToolCall(id=item.call_id,
                            function=FunctionCall(name=item.name, arguments=item.arguments))
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or ()), call]
            else:
                messages.append(ChatMessage(role="assistant", tool_calls=[call]))
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(ChatMessage(role="tool", tool_call_id=item.call_id,
                                        content=item.text()))
        else:
            texts = item.texts()
            content: str | list[dict[str, Any]] = texts[0] if len(texts) == 1 \
                else [{"type": "text", "text": text} for text in texts]
            messages.append(ChatMessage(role=item.role, content=content))
    return messages


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses function tool (`{type, name, parameters, ...}`) in the chat shape
    (`{type, function: {name, parameters, ...}}`)."""
    function = {k: v for k, v in tool.items() if k != "type"}
    return {"type": "function", "function": function}


def chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def response_format(text_format: TextFormat | None) -> dict[str, Any] | None:
    """`text.format` as a chat `response_format` (None for plain text)."""
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": text_format.name, "schema": text_format.schema_,
              "description": text_format.description, "strict": text_format.strict}
    return {"type": "json_schema",
            "json_schema": {k: v for k, v in schema.items() if v is not None}}
