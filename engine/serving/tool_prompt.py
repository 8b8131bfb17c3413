"""Tools and tool turns in the prompt.

A template with a tool format of its own (`ToolFormat.native`) gets the request's `tools`
and its tool turns as Hugging Face templates expect them: an assistant's calls with their
arguments as objects (OpenAI sends them as JSON text), `role: tool` results as they come.

A template without one (the generic format) reads plain turns only, so the tools become a
section of the system prompt (their JSON schemas and how to call them), and an exchange of
calls and results is told in the user turn that led to it: "You called get_weather({"city":
"Paris"}); it returned: 21 C", then the question again. An assistant turn that only called
is not written back: a small model copies its last turn, and one that sees its own call
JSON before the results calls again (SmolLM2-135M, greedy, the Agents SDK's weather round
trip: the same call every turn with the call kept as a turn of its own, with or without
the question restated; with the exchange told in the user turn: "The weather in Paris is
21 degrees Celsius and sunny."). The user and assistant turns still alternate, which strict
templates require.
"""

from __future__ import annotations

import json
from typing import Any

from engine.serving.tool_choice import ToolChoice
from engine.serving.tool_formats import ToolFormat
from openai_api import ChatMessage

RESULTS_FOOTER = "Using these results, answer in plain text"


def _arguments(text: str) -> Any:
    """A call's arguments as an object where its JSON text reads as one."""
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


def tools_section(choice: ToolChoice) -> str:
    """The generic format's instructions: the functions, and how an answer calls them."""
    listed = json.dumps([f.as_dict() for f in choice.functions], ensure_ascii=False)
    example = '{"tool_calls": [{"name": "<function name>", "arguments": {<its arguments>}}]}'
    lines = ["You can call these functions (each one's `parameters` is the JSON schema of "
             "its arguments):", listed, "",
             "To call functions, answer with only this JSON object:", example]
    if choice.named is not None:
        lines.append(f"Answer by calling the function `{choice.named}` once.")
    elif choice.mode == "required":
        lines.append("Answer by calling one of them." if not choice.parallel
                     else "Answer by calling one or more of them.")
    else:
        lines.append("If no function is needed, answer in plain text.")
        if not choice.parallel:
            lines.append("Call at most one function per answer.")
    return "\n".join(lines)


def template_messages(fmt: ToolFormat, messages: list[ChatMessage],
                      choice: ToolChoice | None) -> list[dict[str, Any]]:
    """The messages as `fmt`'s template should read them (tools shown when `choice`)."""
    if fmt.native:
        return [_native(m) for m in messages]
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # call id -> how the call reads, `get_weather({"city": ...})`
    results: list[str] = []
    question = ""  # the last user turn's text
    for message in messages:
        if message.role in ("tool", "function"):
            call = calls.get(message.tool_call_id or "", f"{message.name or 'a function'}()")
            results.append(f"You called {call}; it returned: {message.text()}")
            continue
        if results:
            _tell_results(out, results, question)
            results = []
        if message.role == "user":
            question = message.text()
        turn = message.template_dict()
        if message.tool_calls:
            calls.update((c.id, f"{c.function.name}({c.function.arguments or '{}'})")
                         for c in message.tool_calls)
            turn.pop("tool_calls", None)
            if not turn["content"]:
                continue  # told with its results
        out.append(turn)
    if results:
        _tell_results(out, results, question)
    if choice is not None:
        _add_system(out, tools_section(choice))
    return out


def _tell_results(out: list[dict[str, Any]], results: list[str], question: str) -> None:
    """The results, then the question again: in the user turn before them, or one of
    their own after an assistant's text."""
    ask = f"{RESULTS_FOOTER}: {question}" if question else f"{RESULTS_FOOTER}."
    told = "\n".join([*results, ask])
    if out and out[-1]["role"] == "user":
        out[-1]["content"] = f"{out[-1]['content']}\n\n{told}"
    else:
        out.append({"role": "user", "content": told})


def _native(message: ChatMessage) -> dict[str, Any]:
    turn = message.template_dict()
    if message.tool_calls:
        turn["tool_calls"] = [{"id": c.id, "type": "function",
                               "function": {"name": c.function.name,
                                            "arguments": _arguments(c.function.arguments)}}
                              for c in message.tool_calls]
    return turn


def _add_system(messages: list[dict[str, Any]], section: str) -> None:
    """`section` after the system prompt, or as one when there is none."""
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        first["content"] = f"{first['content']}\n\n{section}" if first["content"] else section
    else:
        messages.insert(0, {"role": "system", "content": section})
