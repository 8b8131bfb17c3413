"""What one request is, and what the pipeline found out answering it.

The request setup (gateway/request_setup.py) makes a `RequestContext` per request: what
was asked, by whom, on which route, with which cache directives. The stages read it and
return typed results (`CacheLookup`, a transform plan, `Answered`); the pipeline records
them in the request's `Report`, and the HTTP layer turns the report into response headers
(`x-cache`, `x-cache-similarity`, `x-headstart-transforms`, `Server-Timing`, ...).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from openai_api import ChatCompletionRequest, CompletionRequest, Kind, ToolCall, Usage
from openai_api.assemble import Assembler

if TYPE_CHECKING:
    from gateway.config import RouteConfig

CacheStatus = Literal["exact", "semantic", "miss", "bypass"]


@dataclass
class CacheControl:
    """Per-request cache directives, from `Cache-Control` or the body's `cache` object."""

    no_cache: bool = False  # skip lookups, still store
    no_store: bool = False  # do not store the answer
    max_age_s: float | None = None  # accept only entries younger than this

    @classmethod
    def parse(cls, header: str | None, body: dict[str, Any] | None = None) -> CacheControl:
        cc = cls()
        for part in (header or "").split(","):
            token = part.strip().lower()
            if token == "no-cache":
                cc.no_cache = True
            elif token == "no-store":
                cc.no_store = True
            elif token.startswith("max-age="):
                try:
                    cc.max_age_s = max(0.0, float(token.split("=", 1)[1]))
                except ValueError:
                    pass
        if body:
            cc.no_cache = cc.no_cache or bool(body.get("no_cache"))
            cc.no_store = cc.no_store or bool(body.get("no_store"))
            if body.get("max_age") is not None:
                cc.max_age_s = float(body["max_age"])
        return cc


@dataclass
class ServerTiming:
    """Stage durations for the `Server-Timing` header, in insertion order."""

    stages: list[tuple[str, float]] = field(default_factory=list)

    def add(self, stage: str, ms: float) -> None:
        self.stages.append((stage, ms))

    def measure(self, stage: str) -> _Timer:
        """`with ctx.timings.measure("cache"): ...` records that block's duration."""
        return _Timer(self, stage)

    def header(self) -> bytes:
        return b", ".join(b"%s;dur=%.2f" % (name.encode(), ms) for name, ms in self.stages)


class _Timer:
    def __init__(self, timing: ServerTiming, stage: str) -> None:
        self.timing, self.stage = timing, stage

    def __enter__(self) -> _Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timing.add(self.stage, (time.perf_counter() - self.t0) * 1000)


@dataclass
class Answer:
    """A completed answer: what the caches store and replay (never an error or abort)."""

    kind: Kind
    model: str
    content: str
    finish_reason: str
    tool_calls: list[ToolCall] | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def folded(cls, assembler: Assembler) -> Answer | None:
        """The finished answer `assembler` folded, or None if it ended without a finish
        reason or carried several choices (the caches keep one)."""
        choice = assembler.only_choice()
        if choice is None:
            return None
        return cls(kind=assembler.kind, model=assembler.model, content=choice.content,
                   finish_reason=choice.finish_reason, tool_calls=choice.tool_calls,
                   usage=assembler.usage or Usage())

    def cacheable(self) -> bool:
        return self.finish_reason in ("stop", "tool_calls")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "content": self.content,
            "finish_reason": self.finish_reason,
            "tool_calls": [t.model_dump() for t in self.tool_calls] if self.tool_calls else None,
            "usage": self.usage.model_dump(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        return cls(
            kind=d["kind"],
            model=d["model"],
            content=d["content"],
            finish_reason=d["finish_reason"],
            tool_calls=[ToolCall.model_validate(t) for t in d["tool_calls"]]
            if d.get("tool_calls")
            else None,
            usage=Usage.model_validate(d.get("usage") or {}),
        )


@dataclass(frozen=True)
class CacheLookup:
    """What the cache stage found for a request: `answer` on a hit."""

    status: CacheStatus
    similarity: float | None = None  # a semantic hit's
    skipped: str | None = None  # why the lookup was skipped (x-cache-bypass-reason)
    answer: Answer | None = None


@dataclass
class Report:
    """What answering one request found out, recorded by the pipeline from the stages'
    results; the HTTP layer renders it as headers and the rate limiter settles on `usage`."""

    cache: CacheLookup = CacheLookup("miss")
    transforms: list[str] = field(default_factory=list)  # e.g. ["window:dropped=4"]
    upstream: str | None = None  # the upstream that answered
    endpoint: str | None = None  # the replica that answered, for a fleet upstream
    upstream_body: bytes | None = None  # a whole answer's bytes, when written unchanged
    parts_failed: int = 0  # parts of a decomposed request that failed (then not stored)
    usage: Usage | None = None  # the answer's usage once it is known


@dataclass
class RequestContext:
    """One request: set up once, read by every stage."""

    request_id: str
    kind: Kind
    body: ChatCompletionRequest | CompletionRequest  # as the client sent it (cache keys use this)
    route: RouteConfig
    client_json: bytes | None = None  # `body`'s JSON as it came over HTTP (None: made here)
    tenant: str | None = None
    namespace: str | None = None  # x-cache-namespace or body.cache.namespace
    session_id: str | None = None  # x-session-id, body.session_id, or the WebSocket's session
    cache_control: CacheControl = field(default_factory=CacheControl)
    cache_salt: str | None = None  # keys the engine's prefix cache (gateway/kv_isolation.py)
    priority: int | None = None  # the engine's request priority: the route's, else the body's
    limit_headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # x-ratelimit-*
    timings: ServerTiming = field(default_factory=ServerTiming)
    started: float = field(default_factory=time.perf_counter)
    report: Report = field(default_factory=Report)
