"""`tools`, `tool_choice` and `parallel_tool_calls` read and checked: which functions the
model is shown, and whether (and which) it must call.

- `auto` (the default with tools): the model may call any tool or answer in text; what it
  writes is parsed (`engine/serving/tool_stream.py`).
- `none`: the tools are hidden from the model (as OpenAI does: it answers in text).
- `required`: at least one call, of any tool (at most one per function,
  `engine/serving/tool_formats.py`); `{"type": "function", "function": {"name"}}`: one
  call of that function. Both are forced by a grammar, so every call's arguments are JSON
  that its `parameters` schema accepts.
- `parallel_tool_calls: false`: at most one call (exactly one when forced).

Each problem is a 400 naming the field: a tool that is not a function or has no name, two
tools of one name, a `tool_choice` naming a function that is not among `tools`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from openai_api import APIError, ChatCompletionRequest

FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Function:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of the arguments object

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


@dataclass(frozen=True)
class ToolChoice:
    """What the model is shown and what it must do."""

    functions: list[Function]  # every tool of the request, in order
    mode: str  # "auto" | "required" | "function" (one named function)
    named: str | None = None  # the function `tool_choice` names
    parallel: bool = True  # more than one call per answer

    @property
    def forced(self) -> bool:
        return self.mode != "auto"

    @property
    def callable(self) -> list[Function]:
        """The functions a forced answer may call."""
        if self.named is None:
            return self.functions
        return [f for f in self.functions if f.name == self.named]

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)


def read_tools(tools: list[dict[str, Any]]) -> list[Function]:
    """`tools` as functions; a 400 naming the first bad entry."""
    functions: list[Function] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise APIError(400, f"{where}.type must be 'function' (the only tool type this "
                           "engine runs)", param=f"{where}.type")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise APIError(400, f"{where}.function must be an object", param=f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            raise APIError(400, f"{where}.function.name must be 1-64 letters, digits, "
                           "underscores, dots or dashes", param=f"{where}.function.name")
        if any(f.name == name for f in functions):
            raise APIError(400, f"{where}.function.name: two tools are named {name!r}",
                           param=f"{where}.function.name")
        parameters = fn.get("parameters", ANY_OBJECT)
        if not isinstance(parameters, dict):
            raise APIError(400, f"{where}.function.parameters must be a JSON schema object",
                           param=f"{where}.function.parameters")
        description = fn.get("description") or ""
        functions.append(Function(name, str(description), parameters or ANY_OBJECT))
    return functions


def read_tool_choice(request: ChatCompletionRequest) -> ToolChoice | None:
    """The request's tools and choice; None when no tool is shown (`tools` absent or empty,
    or `tool_choice: none`)."""
    choice = request.tool_choice
    parallel = (request.model_extra or {}).get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise APIError(400, "parallel_tool_calls must be a boolean", param="parallel_tool_calls")
    if not request.tools:
        if choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice needs `tools` to choose from", param="tool_choice")
        return None
    functions = read_tools(request.tools)
    if choice is None or choice == "auto":
        return ToolChoice(functions, "auto", parallel=parallel is not False)
    if choice == "none":
        return None
    if choice == "required":
        return ToolChoice(functions, "required", parallel=parallel is not False)
    name = _named(choice)
    if not any(f.name == name for f in functions):
        known = ", ".join(f.name for f in functions)
        raise APIError(400, f"tool_choice names the function {name!r}, which is not among "
                       f"the tools ({known})", param="tool_choice")
    return ToolChoice(functions, "function", named=name, parallel=parallel is not False)


def _named(choice: Any) -> str:
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    if isinstance(choice, str):
        raise APIError(400, f"tool_choice {choice!r} is not one of 'auto', 'none', "
                       "'required' or a function", param="tool_choice")
    raise APIError(400, "tool_choice must be 'auto', 'none', 'required' or "
                   '{"type": "function", "function": {"name": ...}}', param="tool_choice")
