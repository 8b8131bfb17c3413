"""Reads a JSON text as it streams in and finds the tool calls in it: each call's name once
its string is whole, and the raw text of its arguments as far as it has come.

A call is an object opened at `call_depth` (1: the document is the call, as Hermes and
Llama 3 write them; 3: `{"tool_calls": [{...}, ...]}`, the generic format). Inside it the
value of `name_key` is the function's name and the value of `args_key` its arguments,
kept as the model wrote them (the bytes a client's `json.loads` reads). One pass over each
character, no re-parsing: a long answer costs what its length does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_WHITESPACE = " \t\r\n"


@dataclass
class ScannedCall:
    name: str | None = None
    args_start: int | None = None  # offset of the arguments' first character in the text
    args_end: int | None = None  # offset just past their last, once they are whole
    closed: bool = False  # the call's object is closed


class CallScanner:
    """Feed it text; `calls` grows as call objects open, and each fills in as it streams."""

    def __init__(self, call_depth: int, name_key: str = "name",
                 args_key: str = "arguments") -> None:
        self.call_depth = call_depth
        self.name_key, self.args_key = name_key, args_key
        self.text = ""
        self.calls: list[ScannedCall] = []
        self.complete = False  # the outermost value has closed
        self.end = 0  # then: the offset just past it
        self._stack: list[str] = []  # "{" / "[" of the open containers
        self._expect_key = False  # in an object, the next string is a key
        self._in_string = False
        self._escape = False
        self._string_start = 0
        self._key: str | None = None  # the key whose value is being read at the call's level
        self._value: str | None = None  # that value's kind while it is read: '"', '{', 's'

    def feed(self, text: str) -> None:
        start = len(self.text)
        self.text += text
        for offset, ch in enumerate(text, start):
            if not self.complete:
                self._char(ch, offset)

    def args_text(self, call: ScannedCall, upto: int | None = None) -> str:
        """The arguments' raw text so far (whole once `args_end` is set)."""
        if call.args_start is None:
            return ""
        end = call.args_end if call.args_end is not None else len(self.text)
        return self.text[call.args_start:end if upto is None else min(end, upto)]

    # ------------------------------------------------------------ one character

    def _at_call_level(self) -> bool:
        return len(self._stack) == self.call_depth and self._stack[-1] == "{" and \
            bool(self.calls) and not self.calls[-1].closed

    def _char(self, ch: str, offset: int) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                self._string_end(offset)
            return
        if ch in _WHITESPACE:
            return
        if self._at_call_level() and self._value == "s" and ch in ",}":
            self._value_end(offset)  # a number or literal ends at what follows it
        if ch == '"':
            self._in_string, self._string_start = True, offset
            if self._at_call_level() and not self._expect_key:
                self._value_start('"', offset)
        elif ch in "{[":
            if self._at_call_level() and not self._expect_key:
                self._value_start(ch, offset)
            self._stack.append(ch)
            self._expect_key = ch == "{"
            if ch == "{" and len(self._stack) == self.call_depth:
                self.calls.append(ScannedCall())
                self._key = self._value = None
        elif ch in "}]":
            if not self._stack:
                return
            closing_call = len(self._stack) == self.call_depth and self._stack[-1] == "{"
            self._stack.pop()
            self._expect_key = False
            if closing_call and self.calls:
                self.calls[-1].closed = True
            elif self._at_call_level() and self._value in ("{", "["):
                self._value_end(offset + 1)
            if not self._stack:
                self.complete, self.end = True, offset + 1
        elif ch == ",":
            self._expect_key = bool(self._stack) and self._stack[-1] == "{"
        elif ch == ":":
            pass
        elif self._at_call_level() and not self._expect_key and self._value is None:
            self._value_start("s", offset)

    def _string_end(self, offset: int) -> None:
        at_call = self._at_call_level()
        if self._expect_key:
            self._expect_key = False
            if at_call:
                self._key = self._decode(self._string_start, offset)
        elif at_call and self._value == '"':
            if self._key == self.name_key:
                self.calls[-1].name = self._decode(self._string_start, offset)
            self._value_end(offset + 1)

    def _decode(self, start: int, end: int) -> str | None:
        try:
            value = json.loads(self.text[start:end + 1])
        except ValueError:
            return None
        return value if isinstance(value, str) else None

    def _value_start(self, kind: str, offset: int) -> None:
        self._value = kind
        if self._key == self.args_key:
            self.calls[-1].args_start = offset

    def _value_end(self, end: int) -> None:
        if self._key == self.args_key and self.calls[-1].args_start is not None:
            self.calls[-1].args_end = end
        self._value = self._key = None
