"""The generation endpoints both sides serve, and the request kind each one is.

A request's kind (`chat`, `completion`) is decided here once, from the path it came on,
and travels with it; the gateway's pipeline, its caches and the engine's server branch on
it, never on a second copy of the list. A `responses` request (OpenAI's Responses API) is
answered as the chat request it translates to (`responses_to_chat.py`), so past its setup
it runs as kind `chat`. Adding an endpoint: its models (`openai_api/`),
an entry here, a router on each side that serves it, and the pipeline's handling of its
kind (docs/internals.md, "Adding an endpoint").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from openai_api.models import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    SamplingFields,
)
from openai_api.responses import ResponsesRequest

Kind = Literal["chat", "completion", "responses"]
GenerationRequest = ChatCompletionRequest | CompletionRequest
Chunk = ChatCompletionChunk | Completion  # a legacy completion streams in its own shape
WholeAnswer = ChatCompletion | Completion


@dataclass(frozen=True)
class Endpoint:
    """One generation endpoint: `POST /v1/{path}`."""

    path: str
    kind: Kind
    request: type[BaseModel]


ENDPOINTS: dict[str, Endpoint] = {e.path: e for e in (
    Endpoint("chat/completions", "chat", ChatCompletionRequest),
    Endpoint("completions", "completion", CompletionRequest),
    Endpoint("responses", "responses", ResponsesRequest),
)}


def kind_of(request: SamplingFields) -> Kind:
    """The kind of a request already parsed (a sub-request made from another)."""
    return "chat" if isinstance(request, ChatCompletionRequest) else "completion"
