"""What the Responses API answers: the `response` object, the page of a response's input
items, and the typed events a streamed response is sent as (`event: TYPE` + `data: JSON`,
each with its `sequence_number`), in the shapes the official SDK parses.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from openai_api.errors import APIError
from openai_api.models import Usage
from openai_api.responses import ResponsesRequest
from openai_api.responses_items import FunctionCallItem, Item, MessageItem, OutputText

ResponseStatus = Literal["completed", "failed", "in_progress", "incomplete"]
OutputItem = MessageItem | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens the engine read from its prefix cache
    cache_write_tokens: int = 0  # OpenAI's explicit prompt-cache writes: none here


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0

    @classmethod
    def of(cls, usage: Usage) -> ResponseUsage:
        """A chat completion's usage in the Responses API's names."""
        cached = usage.prompt_tokens_details.cached_tokens
        return cls(input_tokens=usage.prompt_tokens,
                   input_tokens_details=InputTokensDetails(cached_tokens=cached),
                   output_tokens=usage.completion_tokens, total_tokens=usage.total_tokens)


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(BaseModel):
    code: str
    message: str


class ResponseObject(BaseModel):
    """A response: what was asked (echoed) and what the model answered (`output`)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus = "in_progress"
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    store: bool = True
    user: str | None = None
    background: bool = False

    @classmethod
    def started(cls, request: ResponsesRequest, response_id: str, created_at: int
                ) -> ResponseObject:
        """The response to `request` before any output: the request's settings echoed."""
        text = request.text.model_dump(by_alias=True, exclude_none=True) \
            if request.text is not None and request.text.format is not None else None
        return cls(
            id=response_id, created_at=created_at, model=request.model,
            instructions=request.instructions, max_output_tokens=request.max_output_tokens,
            parallel_tool_calls=request.parallel_tool_calls is not False,
            previous_response_id=request.previous_response_id,
            temperature=request.temperature, top_p=request.top_p,
            tool_choice=request.tool_choice or "auto",
            tools=[t.model_dump(exclude_none=True) for t in request.tools or ()],
            metadata=request.metadata or {}, store=request.store, user=request.user,
            **({"text": text} if text else {}))

    def output_text(self) -> str:
        """The text of every message in the output, joined (the SDK's `output_text`)."""
        return "".join(part.text for item in self.output if isinstance(item, MessageItem)
                       for part in item.content if isinstance(part, OutputText))


class InputItemList(BaseModel):
    """`GET /v1/responses/{id}/input_items`: one page of the items the response was
    answered from."""

    object: Literal["list"] = "list"
    data: list[Item]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False

    @classmethod
    def page(cls, items: list[Item], *, order: Literal["asc", "desc"], limit: int,
             after: str | None) -> InputItemList:
        """The page of `items` (oldest first) in `order`, at most `limit` of them, starting
        after the item with id `after` (a 400 naming `after` when there is none)."""
        ordered = items if order == "asc" else items[::-1]
        if after is not None:
            ids = [item.id for item in ordered]
            if after not in ids:
                raise APIError(400, f"Invalid value for 'after': no input item with id "
                               f"'{after}' in this response", param="after",
                               code="invalid_value")
            ordered = ordered[ids.index(after) + 1:]
        data = ordered[:limit]
        return cls(data=data, first_id=data[0].id if data else None,
                   last_id=data[-1].id if data else None, has_more=len(ordered) > limit)


class DeletedResponse(BaseModel):
    """`DELETE /v1/responses/{id}`."""

    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


# ---------------------------------------------------------------- stream events


class _Event(BaseModel):
    sequence_number: int = 0

    def sse(self) -> bytes:
        """The event as OpenAI streams it: its type on an `event:` line, then its JSON."""
        type_: str = self.type  # type: ignore[attr-defined]
        return b"event: %s\ndata: %s\n\n" % (type_.encode(), self.model_dump_json().encode())


class ResponseStateEvent(_Event):
    """The response as a whole: created, in progress, or finished one way or another."""

    type: Literal["response.created", "response.in_progress", "response.completed",
                  "response.incomplete", "response.failed"]
    response: ResponseObject


class OutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class _ItemEvent(_Event):
    """An event about one output item."""

    item_id: str
    output_index: int


class _PartEvent(_ItemEvent):
    """An event about a message's content part (a response's message has one)."""

    content_index: int = 0


class ContentPartEvent(_PartEvent):
    type: Literal["response.content_part.added", "response.content_part.done"]
    part: OutputText


class TextDeltaEvent(_PartEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class TextDoneEvent(_PartEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class ArgumentsDeltaEvent(_ItemEvent):
    type: Literal["response.function_call_arguments.delta"] = \
        "response.function_call_arguments.delta"
    delta: str


class ArgumentsDoneEvent(_ItemEvent):
    type: Literal["response.function_call_arguments.done"] = \
        "response.function_call_arguments.done"
    name: str
    arguments: str


ResponseEvent = (ResponseStateEvent | OutputItemEvent | ContentPartEvent | TextDeltaEvent
                 | TextDoneEvent | ArgumentsDeltaEvent | ArgumentsDoneEvent)
