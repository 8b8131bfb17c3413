"""The generation endpoints both sides serve, and the request kind each one is.

A request's kind (`chat`, `completion`) is decided here once, from the path it came on,
and travels with it; the gateway's pipeline, its caches and the engine's server branch on
it, never on a second copy of the list. Adding an endpoint: its models (`openai_api/`),
an entry here, a router on each side that serves it, and the pipeline's handling of its
kind (docs/internals.md, "Adding an endpoint").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from openai_api.models import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    SamplingFields,
)

Kind = Literal["chat", "completion"]
GenerationRequest = ChatCompletionRequest | CompletionRequest
Chunk = ChatCompletionChunk | Completion  # a legacy completion streams in its own shape
WholeAnswer = ChatCompletion | Completion


@dataclass(frozen=True)
class Endpoint:
    """One generation endpoint: `POST /v1/{path}`."""

    path: str
    kind: Kind
    request: type[SamplingFields]


ENDPOINTS: dict[str, Endpoint] = {e.path: e for e in (
    Endpoint("chat/completions", "chat", ChatCompletionRequest),
    Endpoint("completions", "completion", CompletionRequest),
)}


def kind_of(request: SamplingFields) -> Kind:
    """The kind of a request already parsed (a sub-request made from another)."""
    return "chat" if isinstance(request, ChatCompletionRequest) else "completion"
