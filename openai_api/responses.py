"""`POST /v1/responses`: OpenAI's Responses API request, as the gateway reads it.

It is answered through chat completions (`responses_to_chat.py`), so it accepts what a chat
request can carry: text input (a string, or items: `responses_items.py`), `instructions`,
function tools with `tool_choice` and `parallel_tool_calls`, `text.format` (text,
json_object, json_schema), `max_output_tokens` and the sampling fields. `store` (default
true) keeps the response for `GET /v1/responses/{id}` and for a later request's
`previous_response_id`. What it cannot honour (hosted tools, a `conversation`, a stored
`prompt`) is a 400 naming the field, never ignored.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from openai_api.responses_items import Item, MessageItem, read_items

RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9]{1,96}")
TOOL_CHOICES = ("auto", "none", "required")


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def check_response_id(value: str) -> str:
    if not RESPONSE_ID.fullmatch(value):
        raise ValueError("a response id is 'resp_' followed by letters and digits")
    return value


ResponseId = Annotated[str, AfterValidator(check_response_id)]


class FunctionTool(BaseModel):
    """A function the model may call (the Responses shape: its fields at the top level)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


def check_tool_choice(value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if value is None or value in TOOL_CHOICES:
        return value
    if isinstance(value, dict) and value.get("type") == "function" \
            and isinstance(value.get("name"), str) and value["name"]:
        return value
    raise ValueError("expected 'auto', 'none', 'required' or {'type': 'function', 'name': ...}")


class TextFormat(BaseModel):
    """`text.format`: plain text, JSON mode, or JSON that follows `schema`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_named(self) -> TextFormat:
        if self.type == "json_schema" and (not self.name or self.schema_ is None):
            raise ValueError("a json_schema format needs 'name' and 'schema'")
        return self


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    """The fields the gateway reads; unknown ones are accepted (SDKs send new ones first)
    and not acted on."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[Any]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Annotated[str | dict[str, Any] | None, AfterValidator(check_tool_choice)] = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    store: bool = True
    previous_response_id: ResponseId | None = None
    stream: bool = False
    user: str | None = None
    conversation: Any = None  # refused: the Conversations API is not served here
    prompt: Any = None  # refused: stored prompt templates are not served here
    # vLLM's and Headstart's extensions, as on chat requests
    cache_salt: str | None = Field(default=None, min_length=1)
    priority: int | None = Field(default=None, strict=True)
    session_id: str | None = None
    cache: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_shape(cls, value: Any) -> Any:
        if not isinstance(value, str | list):
            raise ValueError("expected a string or a list of input items")
        return value

    @field_validator("conversation", "prompt")
    @classmethod
    def _not_served(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("not supported by this server; chain responses with "
                             "previous_response_id")
        return value

    def input_items(self) -> list[Item]:
        """The input as typed items (a string is one user message); a 400 naming the place
        of a bad or unsupported item (`input[2].type`)."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return read_items(self.input)

    def text_format(self) -> TextFormat | None:
        return self.text.format if self.text is not None else None
