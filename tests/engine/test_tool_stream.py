"""engine/serving/call_scanner.py and tool_stream.py: the text of an answer, fed in pieces,
becomes content and OpenAI tool-call deltas. Pure text, no model."""

from __future__ import annotations

import pytest

from engine.serving.call_scanner import CallScanner
from engine.serving.tool_choice import Function, ToolChoice
from engine.serving.tool_formats import GENERIC, HERMES, LLAMA3_JSON
from engine.serving.tool_stream import StreamEvents, ToolCallStream

FUNCTIONS = [Function("get_weather", "", {"type": "object"}), Function("add", "", {})]
CALLS = ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\\"ris", '
         '"days": [1, {"x": 2}]}}, {"name": "add", "arguments": {}}]}')


def run(fmt, mode: str, text: str, step: int = 3) -> list[StreamEvents]:
    stream = ToolCallStream(fmt, ToolChoice(FUNCTIONS, mode))
    events = [stream.feed(text[i:i + step]) for i in range(0, len(text), step)]
    return [e for e in [*events, stream.finish()] if e]


def folded(events: list[StreamEvents]) -> tuple[str, list[tuple[str, str]]]:
    calls: dict[int, list[str]] = {}
    for e in events:
        for call in e.calls:
            slot = calls.setdefault(call["index"], ["", ""])
            slot[0] += call["function"].get("name") or ""
            slot[1] += call["function"].get("arguments") or ""
    return "".join(e.content for e in events), [tuple(c) for _, c in sorted(calls.items())]


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_the_scanner_finds_names_and_raw_arguments_however_the_text_is_cut(step):
    scanner = CallScanner(call_depth=3)
    for i in range(0, len(CALLS), step):
        scanner.feed(CALLS[i:i + step])
    assert scanner.complete and scanner.end == len(CALLS)
    assert [(c.name, scanner.args_text(c)) for c in scanner.calls] == [
        ("get_weather", '{"city": "Pa\\"ris", "days": [1, {"x": 2}]}'), ("add", "{}")]


def test_a_forced_call_sends_index_id_and_name_first_then_the_arguments_in_pieces():
    events = run(GENERIC, "required", CALLS)
    first = events[0].calls[0]
    assert first["index"] == 0 and first["id"].startswith("call_") and len(first["id"]) == 29
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    pieces = [c["function"]["arguments"] for e in events[1:] for c in e.calls
              if c["index"] == 0]
    assert len(pieces) > 5 and all("name" not in c for c in pieces)
    assert folded(events) == ("", [("get_weather", '{"city": "Pa\\"ris", "days": [1, {"x": 2}]}'),
                                   ("add", "{}")])


def test_under_auto_a_call_is_sent_whole_once_its_object_closes():
    events = run(GENERIC, "auto", CALLS, step=1)
    assert [len(e.calls) for e in events] == [1, 1]
    assert folded(events)[1][1] == ("add", "{}")


@pytest.mark.parametrize("text", [
    "Hello, {not a call}",
    '{"answer": 42}',
    '{"tool_calls": [{"name": "unknown", "arguments": {}}]}',
    '{"tool_calls": [{"name": "add", "arguments": [1, 2]}]}',
])
def test_under_auto_text_that_is_not_a_valid_call_stays_content_whole(text):
    assert folded(run(GENERIC, "auto", text)) == (text, [])


def test_hermes_text_before_the_tags_is_content_and_each_tag_holds_a_call():
    text = ('Let me check.<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
    for mode in ("auto", "required"):
        assert folded(run(HERMES, mode, text, step=2)) == (
            "Let me check.", [("add", '{"a": 1}'), ("get_weather", "{}")])


def test_hermes_holds_back_what_may_begin_a_tag_and_releases_it_when_it_does_not():
    stream = ToolCallStream(HERMES, ToolChoice(FUNCTIONS, "auto"))
    assert stream.feed("a <tool").content == "a "
    assert stream.feed("s are handy").content == "<tools are handy"
    assert not stream.called


def test_llama3_json_reads_parameters_after_the_python_tag():
    text = '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}'
    assert folded(run(LLAMA3_JSON, "auto", text)) == ("", [("add", '{"a": 1, "b": 2}')])


def test_an_answer_that_is_only_a_prefix_of_a_call_stays_content():
    assert folded(run(GENERIC, "auto", '  {"tool_')) == ('  {"tool_', [])
