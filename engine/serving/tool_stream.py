"""An answer's text in, OpenAI's content and tool-call deltas out, as the text streams.

Per format (`engine/serving/tool_formats.py`): an answer that opens as calls (generic,
Llama 3 JSON) is read as JSON from its first character; Hermes calls sit in
`<tool_call>` tags with text around them, which stays content (a tail that may begin a tag
is held back until it does or does not). Text that is not a call is content.

A forced answer (`required`, a named function) follows the calls grammar, so each call is
sent as it streams: its index, id and name as soon as the name is whole, then its
arguments in the pieces they arrive in. Under `auto` the model writes freely, so a call is
sent only once its object is closed, names a function of the request and has object
arguments; an answer whose calls all fail that stays content, whole.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from engine.serving.call_scanner import CallScanner, ScannedCall
from engine.serving.tool_choice import ToolChoice
from engine.serving.tool_formats import ToolFormat

_BLANKS = re.compile(r"\s+")


def call_id() -> str:
    """An id as OpenAI writes them: `call_` and 24 hex digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class StreamEvents:
    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI tool-call deltas

    def __bool__(self) -> bool:
        return bool(self.content or self.calls)

    def add(self, other: StreamEvents) -> StreamEvents:
        self.content += other.content
        self.calls += other.calls
        return self


@dataclass
class _Sent:
    index: int
    id: str
    args_sent: int = 0  # characters of the arguments already sent


class ToolCallStream:
    """One choice's text, fed as it comes; `called` once a call has been sent."""

    def __init__(self, fmt: ToolFormat, choice: ToolChoice) -> None:
        self.fmt, self.choice = fmt, choice
        self.eager = choice.forced
        self.state = "start" if fmt.starts else "text"
        self.pending = ""  # text held back: it may still open a call
        self.raw = ""  # everything fed, for an auto answer whose calls fail
        self.swallowed = ""  # text read as calls so far
        self.scanner: CallScanner | None = None
        self.scanned = 0  # calls of earlier scanners (Hermes: one per tag)
        self.sent: dict[int, _Sent] = {}  # scanned call number -> what was sent of it
        self.failed = False

    @property
    def called(self) -> bool:
        return bool(self.sent)

    def feed(self, text: str) -> StreamEvents:
        self.raw += text
        events = StreamEvents()
        while text:
            if self.state == "start":
                text = self._start(text, events)
            elif self.state == "text":
                text = self._text(text, events)
            else:
                text = self._calls(text, events)
        return events

    def finish(self) -> StreamEvents:
        events = StreamEvents()
        if self.scanner is not None:
            self._emit(events, final=True)
        if not self.sent and self.swallowed and not self.eager:
            return StreamEvents(content=self.pending + self.swallowed if self.state == "start"
                                else self.swallowed + self.pending)
        if not (self.sent and not self.pending.strip()):  # blank after the calls: dropped
            events.content += self.pending
        self.pending = ""
        return events

    # ------------------------------------------------------------ states

    def _start(self, text: str, events: StreamEvents) -> str:
        """Undecided: does the answer open as calls?"""
        self.pending += text
        head = _BLANKS.sub("", self.pending)
        for start in self.fmt.starts:
            if head.startswith(start):
                body = self.pending.lstrip()
                if start == "<|python_tag|>":
                    body = body[len(start):]
                self.pending, self.state = "", "calls"
                self._open_scanner()
                return body
            if start.startswith(head):
                return ""  # still a prefix of a call: wait
        self.state = "text"
        text, self.pending = self.pending, ""
        return text

    def _text(self, text: str, events: StreamEvents) -> str:
        tag = self.fmt.open_tag
        text = self.pending + text
        self.pending = ""
        at = text.find(tag) if tag else -1
        if at >= 0:
            events.content += text[:at].rstrip() if self.scanned else text[:at]
            self.swallowed += tag
            self.state = "calls"
            self._open_scanner()
            return text[at + len(tag):]
        if self.scanned and tag.startswith(text.lstrip()):  # blank, maybe the next tag
            self.pending = text
            return ""
        hold = next((k for k in range(min(len(tag) - 1, len(text)), 0, -1)
                     if tag.startswith(text[-k:])), 0) if tag else 0
        self.pending = text[len(text) - hold:]
        events.content += text[:len(text) - hold]
        return ""

    def _calls(self, text: str, events: StreamEvents) -> str:
        scanner = self.scanner
        assert scanner is not None
        if scanner.complete:  # between a call's JSON and its closing tag, or after it
            self.pending += text
            close = self.fmt.close_tag
            at = self.pending.find(close) if close else -1
            if at < 0:
                if not close:  # nothing follows a JSON answer; drop what does
                    self.pending = ""
                return ""
            self.swallowed += self.pending[:at + len(close)]
            rest, self.pending = self.pending[at + len(close):].lstrip(), ""
            self.scanned += len(scanner.calls)
            self.scanner, self.state = None, "text"
            return rest
        before = len(scanner.text)
        scanner.feed(text)
        used = scanner.end - before if scanner.complete else len(text)
        self.swallowed += text[:used]
        self._emit(events, final=scanner.complete)
        return text[used:] if scanner.complete else ""

    def _open_scanner(self) -> None:
        self.scanner = CallScanner(self.fmt.call_depth, args_key=self.fmt.args_key)

    # ------------------------------------------------------------ sending calls

    def _emit(self, events: StreamEvents, final: bool) -> None:
        scanner = self.scanner
        assert scanner is not None
        for number, call in enumerate(scanner.calls, self.scanned):
            if self.eager:
                self._send_piece(number, call, scanner, events)
            elif (call.closed or final) and number not in self.sent:
                self._send_whole(number, call, scanner, events)

    def _send_piece(self, number: int, call: ScannedCall, scanner: CallScanner,
                    events: StreamEvents) -> None:
        sent = self.sent.get(number)
        if sent is None:
            if call.name is None:
                return
            sent = self.sent[number] = _Sent(len(self.sent), call_id())
            events.calls.append({"index": sent.index, "id": sent.id, "type": "function",
                                 "function": {"name": call.name, "arguments": ""}})
        args = scanner.args_text(call)
        if len(args) > sent.args_sent:
            piece, sent.args_sent = args[sent.args_sent:], len(args)
            events.calls.append({"index": sent.index, "function": {"arguments": piece}})

    def _send_whole(self, number: int, call: ScannedCall, scanner: CallScanner,
                    events: StreamEvents) -> None:
        if not call.closed or self.choice.function(call.name or "") is None:
            self.failed = True
            return
        args = scanner.args_text(call)
        try:
            if not isinstance(json.loads(args), dict):
                raise ValueError("arguments are not an object")
        except ValueError:
            self.failed = True
            return
        sent = self.sent[number] = _Sent(len(self.sent), call_id(), len(args))
        events.calls.append({"index": sent.index, "id": sent.id, "type": "function",
                             "function": {"name": call.name, "arguments": args}})
