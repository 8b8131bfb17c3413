"""The items a Responses conversation is made of, as OpenAI's Responses API has them: messages
with text parts, function calls and their outputs. The same models serve a request's `input`,
a response's `output` and the items a stored response lists (`input_items`).

Only the items a chat completion can carry are accepted; anything else (an image, a hosted
tool's call, a reasoning item) is a 400 naming its place (`input[2].type`,
`input[0].content[1].type`), never dropped without a word. `read_items` is the one reader.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openai_api.errors import APIError, validation_error

ItemStatus = Literal["in_progress", "completed", "incomplete"]
M = TypeVar("M", bound=BaseModel)


def item_id(prefix: str) -> str:
    """An OpenAI-looking item id: `msg_…`, `fc_…`."""
    return f"{prefix}_{uuid.uuid4().hex}"


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class InputText(_Part):
    type: Literal["input_text"] = "input_text"
    text: str


class OutputText(_Part):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class Refusal(_Part):
    type: Literal["refusal"] = "refusal"
    refusal: str


ContentPart = InputText | OutputText | Refusal


def part_text(part: ContentPart) -> str:
    return part.refusal if isinstance(part, Refusal) else part.text


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    status: ItemStatus | None = None


class MessageItem(_Item):
    """A message: the client's (`user`, `system`, `developer`) or the model's (`assistant`).
    Its content is a string or a list of text parts."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]

    def texts(self) -> list[str]:
        """The text of each part, in order (a string is one part)."""
        if isinstance(self.content, str):
            return [self.content]
        return [part_text(part) for part in self.content]

    def listed(self) -> MessageItem:
        """This message as OpenAI lists it: content as parts (`input_text` for the client's,
        `output_text` for the model's)."""
        if not isinstance(self.content, str):
            return self
        part = OutputText(text=self.content) if self.role == "assistant" \
            else InputText(text=self.content)
        return self.model_copy(update={"content": [part]})


class FunctionCallItem(_Item):
    """A call of one of the request's function tools, made by the model."""

    type: Literal["function_call"] = "function_call"
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(_Item):
    """What the client's function returned, for the call with `call_id`."""

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str = Field(min_length=1)
    output: str | list[InputText]

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(part.text for part in self.output)


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem

ITEM_TYPES: dict[str, type[Item]] = {
    "message": MessageItem, "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}
PART_TYPES: dict[str, type[ContentPart]] = {
    "input_text": InputText, "output_text": OutputText, "refusal": Refusal,
}
OUTPUT_PART_TYPES: dict[str, type[InputText]] = {"input_text": InputText}
ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def read_items(items: list[Any], where: str = "input") -> list[Item]:
    """`items` (JSON values) as typed items; a 400 naming the place of the first bad one. An
    item without `type` that has a `role` is a message (the SDK's easy input form)."""
    out: list[Item] = []
    for i, value in enumerate(items):
        place = f"{where}[{i}]"
        kind = value.get("type", "message" if "role" in value else None) \
            if isinstance(value, dict) else None
        if isinstance(value, dict) and kind == "message" and "content" in value:
            value = {**value, "content": _parts(value["content"], f"{place}.content",
                                                PART_TYPES)}
        elif isinstance(value, dict) and kind == "function_call_output" and "output" in value:
            value = {**value, "output": _parts(value["output"], f"{place}.output",
                                               OUTPUT_PART_TYPES)}
        out.append(typed(value, ITEM_TYPES, place, kind))
    return out


def with_ids(items: list[Item]) -> list[Item]:
    """`items` as a stored response lists them: each with an id (a new one where the client
    gave none), a status, and a message's content as parts."""
    out = []
    for item in items:
        if isinstance(item, MessageItem):
            item = item.listed()
        update = {"id": item.id or item_id(ID_PREFIXES[item.type]),
                  "status": item.status or "completed"}
        out.append(item.model_copy(update=update))
    return out


def _parts(value: Any, place: str, types: dict[str, type[M]]) -> Any:
    """A list of content parts read one by one (so a bad one is named by its index), or a
    string as it is."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise APIError(400, f"Invalid type for '{place}': expected a string or a list of "
                       "content parts.", param=place, code="invalid_type")
    return [typed(part, types, f"{place}[{j}]") for j, part in enumerate(value)]


def typed(value: Any, types: dict[str, type[M]], place: str, kind: Any = None) -> M:
    """`value` validated as the model its `type` names among `types` (`kind`: the type to
    assume, when the caller worked it out); a 400 naming `place.type` for a type not
    among them, or the field within `place` that is wrong."""
    if not isinstance(value, dict):
        raise APIError(400, f"Invalid type for '{place}': expected an object.", param=place,
                       code="invalid_type")
    kind = value.get("type") if kind is None else kind
    model = types.get(kind) if isinstance(kind, str) else None
    if model is None:
        expected = ", ".join(f"'{name}'" for name in types)
        raise APIError(400, f"Invalid value for '{place}.type': {kind!r} is not supported "
                       f"here; expected one of {expected}.", param=f"{place}.type",
                       code="invalid_value")
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        raise validation_error([{**err, "loc": (place, *err["loc"])} for err in errors]) \
            from None
