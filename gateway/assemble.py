"""Chunks in, one finished answer out: the non-streaming response and the cacheable `Answer`.

The pipeline works on chunks; a client that asked for `stream: false` gets them folded
into one `chat.completion` / `text_completion`, and the caches get the same fold as an
`Answer`. An upstream asked without streaming hands its whole answer over as one chunk
(`as_chunk`).
"""

from __future__ import annotations

from typing import Any, Literal

from engine.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    CompletionChoice,
    DeltaMessage,
    FunctionCall,
    ToolCall,
    Usage,
)
from gateway.context import Answer


class Assembler:
    """Accumulates the chunks of one answer (choice 0; `n` is always 1)."""

    def __init__(self, kind: Literal["chat", "completion"], model: str) -> None:
        self.kind = kind
        self.model = model
        self.id: str | None = None
        self.created: int | None = None
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._tools: dict[int, dict[str, Any]] = {}

    def add(self, chunk: ChatCompletionChunk | Completion) -> None:
        if self.id is None:
            self.id, self.created = chunk.id, chunk.created
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            if isinstance(chunk, ChatCompletionChunk):
                if choice.delta.content:
                    self.parts.append(choice.delta.content)
                for call in choice.delta.tool_calls or ():
                    self._add_tool_delta(call)
            elif choice.text:
                self.parts.append(choice.text)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def _add_tool_delta(self, call: dict[str, Any]) -> None:
        slot = self._tools.setdefault(call.get("index", len(self._tools)),
                                      {"id": None, "name": "", "arguments": ""})
        slot["id"] = call.get("id") or slot["id"]
        fn = call.get("function") or {}
        slot["name"] += fn.get("name") or ""
        slot["arguments"] += fn.get("arguments") or ""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def tool_calls(self) -> list[ToolCall] | None:
        if not self._tools:
            return None
        return [ToolCall(id=t["id"] or f"call_{i}",
                         function=FunctionCall(name=t["name"], arguments=t["arguments"]))
                for i, t in sorted(self._tools.items())]

    def answer(self) -> Answer | None:
        """The finished answer, or None if the stream ended without a finish reason."""
        if self.finish_reason is None:
            return None
        return Answer(kind=self.kind, model=self.model, content=self.text,
                      finish_reason=self.finish_reason, tool_calls=self.tool_calls(),
                      usage=self.usage or Usage())

    def response(self) -> ChatCompletion | Completion:
        """The non-streaming response object for the client."""
        ids: dict[str, Any] = {"model": self.model, "usage": self.usage or Usage()}
        if self.id is not None:
            ids.update(id=self.id, created=self.created)
        reason = self.finish_reason or "stop"
        if self.kind == "chat":
            message = AssistantMessage(content=self.text, tool_calls=self.tool_calls())
            return ChatCompletion(choices=[ChatChoice(message=message, finish_reason=reason)],
                                  **ids)
        return Completion(choices=[CompletionChoice(text=self.text, finish_reason=reason)], **ids)


def as_chunk(answer: ChatCompletion) -> ChatCompletionChunk:
    """A whole `chat.completion` as the one chunk that `Assembler` folds back into it."""
    choices = []
    for choice in answer.choices[:1]:  # `n` is always 1
        message = choice.message
        calls = [{"index": i, "id": t.id, "type": "function",
                  "function": {"name": t.function.name, "arguments": t.function.arguments}}
                 for i, t in enumerate(message.tool_calls or ())]
        delta = DeltaMessage(role="assistant", content=message.content, tool_calls=calls or None)
        choices.append(ChunkChoice(delta=delta, finish_reason=choice.finish_reason))
    return ChatCompletionChunk(id=answer.id, created=answer.created, model=answer.model,
                               choices=choices, usage=answer.usage,
                               system_fingerprint=answer.system_fingerprint)
