"""How a model writes a tool call, read off its chat template, and the grammar that forces
one (`tool_choice` required or a named function).

- **hermes** (Hermes 2/3, Qwen 2.5/3: the template mentions `<tool_call>`): each call is
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, text may come first.
- **llama3_json** (Llama 3.1/3.2: `<|python_tag|>` in the template): the answer is one
  `{"name": ..., "parameters": {...}}`.
- **generic** (a template with no tool format, SmolLM2's case; as llama.cpp does for such
  templates): the tools are listed in the system prompt (`engine/serving/tool_prompt.py`)
  and a call is the whole answer `{"tool_calls": [{"name": ..., "arguments": {...}}]}`.

The grammar lists each callable function as `{"name": <its name>, <args key>: <its
parameters schema>}`, name first, so a stream can send the name before the arguments. A
forced answer holds at most one call per function offered (`MAX_CALLS_PER_FUNCTION`): a
small model otherwise repeats its call until the token limit (SmolLM2-135M, `required`
with one tool: the same call again and again, `finish_reason: length`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.grammar import GrammarSpec, json_schema_grammar
from engine.serving.tool_choice import ToolChoice

MAX_CALLS_PER_FUNCTION = 1


@dataclass(frozen=True)
class ToolFormat:
    name: str
    native: bool  # the chat template renders `tools` and tool turns itself
    call_depth: int  # where call objects open in a JSON document (engine/serving/call_scanner.py)
    args_key: str
    starts: tuple[str, ...] = ()  # an answer that begins so (whitespace aside) is calls
    open_tag: str = ""  # a call is wrapped in these tags (text may surround them)
    close_tag: str = ""


GENERIC = ToolFormat("generic", native=False, call_depth=3, args_key="arguments",
                     starts=('{"tool_calls"',))
HERMES = ToolFormat("hermes", native=True, call_depth=1, args_key="arguments",
                    open_tag="<tool_call>", close_tag="</tool_call>")
LLAMA3_JSON = ToolFormat("llama3_json", native=True, call_depth=1, args_key="parameters",
                         starts=('{"name"', "<|python_tag|>"))


def tool_format(chat_template: str | None) -> ToolFormat:
    """The format the model was trained on, from its template (generic when none)."""
    template = chat_template or ""
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template and "tools" in template:
        return LLAMA3_JSON
    return GENERIC


def call_schema(name: str, args_key: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": name}, args_key: parameters},
            "required": ["name", args_key], "additionalProperties": False}


def calls_grammar(fmt: ToolFormat, choice: ToolChoice) -> GrammarSpec:
    """The grammar of an answer that is only calls: one (a named function, or
    `parallel_tool_calls: false`) or more (`required`)."""
    options = [call_schema(f.name, fmt.args_key, f.parameters) for f in choice.callable]
    one = options[0] if len(options) == 1 else {"anyOf": options}
    single = choice.named is not None or not choice.parallel
    most = 1 if single else MAX_CALLS_PER_FUNCTION * len(options)
    if fmt is GENERIC:
        calls: dict[str, Any] = {"type": "array", "items": one, "minItems": 1,
                                 "maxItems": most}
        return json_schema_grammar({"type": "object", "properties": {"tool_calls": calls},
                                    "required": ["tool_calls"],
                                    "additionalProperties": False}, "tools")
    if fmt is LLAMA3_JSON:
        return json_schema_grammar(one, "tools")
    block = (f'call: {json.dumps(fmt.open_tag + chr(10))} body '
             f'{json.dumps(chr(10) + fmt.close_tag)}\n'
             f'body: %json {json.dumps(one)}\n')
    start = "start: call\n" if most == 1 else f'start: call ("\\n" call){{0,{most - 1}}}\n'
    return GrammarSpec("lark", start + block, "tools")
