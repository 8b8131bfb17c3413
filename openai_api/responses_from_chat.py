"""Chat completion chunks in, a Responses API answer out: the stream's typed events as the
chunks arrive, and the finished `response` object.

A chunk's text opens a `message` item with one `output_text` part and streams into it; each
tool call (by its chat `index`) opens a `function_call` item whose arguments stream as they
come. An item is closed (`…done` events) when the next one opens or the answer ends. A
`finish_reason: length` makes the response `incomplete` (`max_output_tokens`). A whole
(unstreamed) chat completion goes through the same builder as its one chunk
(`openai_api.assemble.as_chunk`), so both forms of an answer are built alike.
"""

from __future__ import annotations

from openai_api.errors import APIError
from openai_api.models import ChatCompletionChunk, Usage, now
from openai_api.responses_items import FunctionCallItem, MessageItem, OutputText, item_id
from openai_api.responses_objects import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    IncompleteDetails,
    OutputItemEvent,
    ResponseError,
    ResponseEvent,
    ResponseObject,
    ResponseStateEvent,
    ResponseUsage,
    TextDeltaEvent,
    TextDoneEvent,
)


class ResponseBuilder:
    """Builds one response from the chunks of the chat answer it was translated to. Each
    call returns the events that chunk makes, numbered in order (`sequence_number`)."""

    def __init__(self, response: ResponseObject) -> None:
        self.response = response  # filled in as the chunks come
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._sequence = 0
        self._open: int | None = None  # output index of the item still streaming
        self._calls: dict[int, int] = {}  # a chat tool call's index -> its output index

    def start(self) -> list[ResponseEvent]:
        return [self._state("response.created"), self._state("response.in_progress")]

    def add(self, chunk: ChatCompletionChunk) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # a Responses request asks for one choice
            delta = choice.delta
            if delta.content:
                events += self._text(delta.content)
            for call in delta.tool_calls or ():
                events += self._call_delta(call)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return events

    def finish(self) -> list[ResponseEvent]:
        """The events that close the response; `response` is then final."""
        events = self._close()
        if not self.response.output:  # an empty answer is still one (empty) message
            events += self._open_message("") + self._close()
        response = self.response
        if self.finish_reason == "length":
            response.status = "incomplete"
            response.incomplete_details = IncompleteDetails(reason="max_output_tokens")
        else:
            response.status, response.completed_at = "completed", now()
        response.usage = ResponseUsage.of(self.usage or Usage())
        kind = "response.completed" if response.status == "completed" else "response.incomplete"
        return [*events, self._state(kind)]

    def fail(self, error: APIError) -> list[ResponseEvent]:
        """The event that ends a response that failed after its stream began."""
        self.response.status = "failed"
        self.response.error = ResponseError(code=error.code or "server_error",
                                            message=error.message)
        return [self._state("response.failed")]

    # ------------------------------------------------------------ items

    def _text(self, text: str) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        index = self._open
        if index is None or not isinstance(self.response.output[index], MessageItem):
            events += self._close() + self._open_message(text)
            index = self._open
            assert index is not None
        else:
            part = self.response.output[index].content[0]
            assert isinstance(part, OutputText)
            part.text += text
        item_id_ = self.response.output[index].id or ""
        return [*events, self._number(TextDeltaEvent(item_id=item_id_, output_index=index,
                                                     delta=text))]

    def _open_message(self, text: str) -> list[ResponseEvent]:
        item = MessageItem(id=item_id("msg"), role="assistant", status="in_progress",
                           content=[OutputText(text=text)])
        index = self._add_item(item)
        part_added = ContentPartEvent(type="response.content_part.added", item_id=item.id or "",
                                      output_index=index, part=OutputText(text=""))
        return [self._added(index), self._number(part_added)]

    def _call_delta(self, call: dict) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        fn = call.get("function") or {}
        key = call.get("index", len(self._calls))
        index = self._calls.get(key)
        if index is None:
            events += self._close()
            item = FunctionCallItem(id=item_id("fc"), call_id=call.get("id") or item_id("call"),
                                    name=fn.get("name") or "unknown", arguments="",
                                    status="in_progress")
            index = self._calls[key] = self._add_item(item)
            events.append(self._added(index))
        item = self.response.output[index]
        assert isinstance(item, FunctionCallItem)
        if fn.get("arguments"):
            item.arguments += fn["arguments"]
            events.append(self._number(ArgumentsDeltaEvent(
                item_id=item.id or "", output_index=index, delta=fn["arguments"])))
        return events

    def _add_item(self, item: MessageItem | FunctionCallItem) -> int:
        self.response.output.append(item)
        self._open = len(self.response.output) - 1
        return self._open

    def _close(self) -> list[ResponseEvent]:
        """The `…done` events of the item still streaming, if any."""
        index, self._open = self._open, None
        if index is None:
            return []
        item = self.response.output[index]
        item.status = "incomplete" if self.finish_reason == "length" else "completed"
        item_id_ = item.id or ""
        if isinstance(item, FunctionCallItem):
            events: list[ResponseEvent] = [self._number(ArgumentsDoneEvent(
                item_id=item_id_, output_index=index, name=item.name, arguments=item.arguments))]
        else:
            part = item.content[0]
            assert isinstance(part, OutputText)
            events = [self._number(TextDoneEvent(item_id=item_id_, output_index=index,
                                                 text=part.text)),
                      self._number(ContentPartEvent(type="response.content_part.done",
                                                    item_id=item_id_, output_index=index,
                                                    part=part.model_copy()))]
        return [*events, self._number(OutputItemEvent(type="response.output_item.done",
                                                      output_index=index,
                                                      item=item.model_copy(deep=True)))]

    # ------------------------------------------------------------ events

    def _added(self, index: int) -> ResponseEvent:
        item = self.response.output[index].model_copy(deep=True)
        if isinstance(item, MessageItem):
            item.content = []  # its part is announced by the next event
        return self._number(OutputItemEvent(type="response.output_item.added",
                                            output_index=index, item=item))

    def _state(self, kind: str) -> ResponseEvent:
        return self._number(ResponseStateEvent(type=kind,  # type: ignore[arg-type]
                                               response=self.response.model_copy(deep=True)))

    def _number(self, event: ResponseEvent) -> ResponseEvent:
        event.sequence_number = self._sequence
        self._sequence += 1
        return event
