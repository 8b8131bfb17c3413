"""Chunks in, one finished answer out.

Both sides work on chunks; a client that asked for `stream: false` gets them folded into
one `chat.completion` / `text_completion` (`Assembler.response`), and the gateway's caches
keep the fold of a one-choice answer (`Assembler.only_choice`). The choices of a request
for `n` of them fold side by side, by their `index`. An upstream asked without streaming
hands its whole answer over as one chunk (`as_chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openai_api.models import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    DeltaMessage,
    FunctionCall,
    TokenLogprob,
    ToolCall,
    Usage,
)

if TYPE_CHECKING:
    from openai_api.registry import Kind


@dataclass(frozen=True)
class FoldedChoice:
    """One choice of a finished answer."""

    content: str
    finish_reason: str
    tool_calls: list[ToolCall] | None


@dataclass
class _Choice:
    """One choice's answer so far."""

    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    chat_logprobs: list[TokenLogprob] | None = None
    text_logprobs: CompletionLogprobs | None = None

    def add_logprobs(self, logprobs: ChoiceLogprobs | CompletionLogprobs) -> None:
        if isinstance(logprobs, ChoiceLogprobs):
            if self.chat_logprobs is None:
                self.chat_logprobs = []
            self.chat_logprobs.extend(logprobs.content or ())
            return
        mine = self.text_logprobs
        if mine is None:
            mine = self.text_logprobs = CompletionLogprobs()
        mine.tokens.extend(logprobs.tokens)
        mine.token_logprobs.extend(logprobs.token_logprobs)
        tops = mine.top_logprobs if mine.top_logprobs is not None else []
        tops.extend(logprobs.top_logprobs or ())
        mine.top_logprobs = tops
        mine.text_offset.extend(logprobs.text_offset)

    def add_tool_delta(self, call: dict[str, Any]) -> None:
        slot = self.tools.setdefault(call.get("index", len(self.tools)),
                                     {"id": None, "name": "", "arguments": ""})
        slot["id"] = call.get("id") or slot["id"]
        fn = call.get("function") or {}
        slot["name"] += fn.get("name") or ""
        slot["arguments"] += fn.get("arguments") or ""

    def tool_calls(self) -> list[ToolCall] | None:
        if not self.tools:
            return None
        return [ToolCall(id=t["id"] or f"call_{i}",
                         function=FunctionCall(name=t["name"], arguments=t["arguments"]))
                for i, t in sorted(self.tools.items())]


class Assembler:
    """Accumulates the chunks of one answer, each choice (`index`) on its own."""

    def __init__(self, kind: Kind, model: str) -> None:
        self.kind = kind
        self.model = model
        self.id: str | None = None
        self.created: int | None = None
        self.usage: Usage | None = None
        self._choices: dict[int, _Choice] = {}

    def add(self, chunk: ChatCompletionChunk | Completion) -> None:
        if self.id is None:
            self.id, self.created = chunk.id, chunk.created
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            slot = self._choices.get(choice.index)
            if slot is None:
                slot = self._choices[choice.index] = _Choice()
            if isinstance(chunk, ChatCompletionChunk):
                if choice.delta.content:
                    slot.parts.append(choice.delta.content)
                for call in choice.delta.tool_calls or ():
                    slot.add_tool_delta(call)
            elif choice.text:
                slot.parts.append(choice.text)
            if choice.logprobs is not None:
                slot.add_logprobs(choice.logprobs)
            if choice.finish_reason:
                slot.finish_reason = choice.finish_reason

    @property
    def finish_reason(self) -> str | None:
        """The first choice's finish reason once every choice has one, else None."""
        choices = self._choices
        if not choices or any(c.finish_reason is None for c in choices.values()):
            return None
        return choices[min(choices)].finish_reason

    def only_choice(self) -> FoldedChoice | None:
        """The one choice of a finished one-choice answer; None if the stream ended without a
        finish reason or carried several choices."""
        if self.finish_reason is None or len(self._choices) != 1:
            return None
        (choice,) = self._choices.values()
        return FoldedChoice("".join(choice.parts), choice.finish_reason or "stop",
                            choice.tool_calls())

    def response(self) -> ChatCompletion | Completion:
        """The non-streaming response object for the client."""
        ids: dict[str, Any] = {"model": self.model, "usage": self.usage or Usage()}
        if self.id is not None:
            ids.update(id=self.id, created=self.created)
        choices = sorted(self._choices.items()) or [(0, _Choice())]
        if self.kind == "chat":
            return ChatCompletion(choices=[
                ChatChoice(index=i, message=AssistantMessage(content="".join(c.parts),
                                                             tool_calls=c.tool_calls()),
                           finish_reason=c.finish_reason or "stop",
                           logprobs=None if c.chat_logprobs is None
                           else ChoiceLogprobs(content=c.chat_logprobs))
                for i, c in choices], **ids)
        return Completion(choices=[CompletionChoice(index=i, text="".join(c.parts),
                                                    finish_reason=c.finish_reason or "stop",
                                                    logprobs=c.text_logprobs)
                                   for i, c in choices], **ids)


def as_chunk(answer: ChatCompletion) -> ChatCompletionChunk:
    """A whole `chat.completion` as the one chunk that `Assembler` folds back into it."""
    choices = []
    for choice in answer.choices:
        message = choice.message
        calls = [{"index": i, "id": t.id, "type": "function",
                  "function": {"name": t.function.name, "arguments": t.function.arguments}}
                 for i, t in enumerate(message.tool_calls or ())]
        delta = DeltaMessage(role="assistant", content=message.content, tool_calls=calls or None)
        choices.append(ChunkChoice(index=choice.index, delta=delta,
                                   finish_reason=choice.finish_reason, logprobs=choice.logprobs))
    return ChatCompletionChunk(id=answer.id, created=answer.created, model=answer.model,
                               choices=choices, usage=answer.usage,
                               system_fingerprint=answer.system_fingerprint)
