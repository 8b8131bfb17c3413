"""What `prompts/` needs from the outside world, as protocols passed in by the caller.

`prompts/` never imports the gateway or a concrete engine: a summariser, a token scorer, a
token counter and an embedding function arrive as parameters, so the same transforms run
against the in-process engine, a remote model, or a plain function in a unit test.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Message = dict[str, Any]  # an OpenAI chat message as a plain dict (role, content, tool_calls, ...)

EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]
"""`await embed(texts) -> [n, d]` L2-normalised rows (e.g. `cache.embedder.Embedder.embed`)."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes a short summary of dropped conversation turns (a cheap upstream model)."""

    async def summarize(self, text: str) -> str: ...


@runtime_checkable
class TokenScorer(Protocol):
    """A small causal LM: log-probability of each token given the ones before it.

    `token_logprobs(ids)[i]` scores `ids[i]`; the first token has no context and scores 0.0.
    """

    async def token_logprobs(self, ids: Sequence[int]) -> list[float]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way the route's upstream will (its tokenizer and chat template)."""

    def count_text(self, text: str) -> int: ...

    def count_messages(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        """Prompt tokens of the whole chat, template overhead and generation prompt included."""
        ...


def message_text(message: Message) -> str:
    """A message's text; list content keeps its `text` parts in order."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))
