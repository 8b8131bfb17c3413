"""Canonical requests: the exact-cache key, the semantic partition and the context hash.

A request reaches the cache as plain data (`CacheRequest`): messages as dicts, the sampling
parameters as a dict. The exact key hashes everything that can change the answer, in a
canonical JSON form (sorted keys, no whitespace, no unset fields), so field order and JSON
formatting never change it while any answer-changing field always does. The semantic cache
embeds only the last user turn (its question, when a long document comes first); what comes
before it is hashed into the partition, so two different conversations, or two documents,
never share an entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

ContextMode = Literal["full", "system", "none", "semantic"]

# Fields that never change the answer (transport, accounting, our own extensions).
NON_ANSWER_FIELDS = frozenset({
    "stream", "stream_options", "user", "session_id", "cache", "metadata", "store",
    "service_tier", "messages", "prompt", "model", "priority",
})
# Sampling knobs: the semantic cache serves only requests at or under the route's
# temperature limit and only complete answers, so these do not split its partitions.
SAMPLING_FIELDS = frozenset({
    "temperature", "top_p", "top_k", "seed", "max_tokens", "max_completion_tokens",
    "presence_penalty", "frequency_penalty", "n",
})
# Length limits: a complete answer (finish_reason stop) of K tokens answers any request
# allowed K or more, so neither cache keys on them (`answer_fits` checks K at lookup).
LIMIT_FIELDS = frozenset({"max_tokens", "max_completion_tokens"})
CHARS_PER_TOKEN = 4  # a stored answer without a token count (curated) is counted this way
# Values equal to the API's defaults are dropped, so sending a default changes nothing.
DEFAULT_VALUES = {"n": 1, "echo": False, "logprobs": False}
# Temperature at or under which sampling is treated as deterministic enough to cache.
DEFAULT_TEMPERATURE = 1.0
# A last user turn longer than this (characters; the embedder reads ~256 word pieces) is
# split into its document, matched exactly, and its question, embedded (`split_turn`).
QUESTION_MAX_CHARS = 1000


@dataclass
class CacheRequest:
    """What the caches need to know about one request (no HTTP, no pydantic)."""

    route: str
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # chat; [] for completions
    prompt: str | list[int] | None = None  # legacy completions
    params: dict[str, Any] = field(default_factory=dict)  # every other body field
    tenant: str | None = None
    namespace: str | None = None
    kind: Literal["chat", "completion"] = "chat"

    @property
    def temperature(self) -> float:
        t = self.params.get("temperature")
        return DEFAULT_TEMPERATURE if t is None else float(t)

    @property
    def has_tools(self) -> bool:
        return bool(self.params.get("tools")) or any(
            m.get("tool_calls") or m.get("role") in ("tool", "function") for m in self.messages
        )


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, `None` members dropped from objects."""
    return json.dumps(_drop_none(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()


def answer_params(req: CacheRequest) -> dict[str, Any]:
    """The body fields that change the answer (sampling, tools, format, limits...)."""
    params = {k: v for k, v in req.params.items() if k not in NON_ANSWER_FIELDS and v is not None
              and not (k in DEFAULT_VALUES and v == DEFAULT_VALUES[k])}
    if "max_completion_tokens" in params:  # two spellings of one limit
        params["max_tokens"] = params.pop("max_completion_tokens")
    if isinstance(params.get("stop"), str):
        params["stop"] = [params["stop"]]
    return params


def canonical_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its role and every field; list content keeps its parts in order."""
    return {k: v for k, v in message.items() if v is not None}


def scope(req: CacheRequest, route_wide: bool = False) -> list[str]:
    """Who may share an entry: tenant, namespace, route, model, request kind. `route_wide`:
    the scope of entries stored without a tenant (curated), which serve every tenant."""
    tenant = "" if route_wide else req.tenant or ""
    return [tenant, req.namespace or "", req.route, req.model, req.kind]


def max_tokens(req: CacheRequest) -> int | None:
    """The request's completion-length limit, in either spelling."""
    limit = req.params.get("max_completion_tokens", req.params.get("max_tokens"))
    return None if limit is None else int(limit)


def answer_tokens(answer: dict[str, Any]) -> int:
    """A stored answer's length in tokens: its usage, the count it was stored with (see
    `counted`), or its characters / CHARS_PER_TOKEN."""
    usage = answer.get("usage") or {}
    if usage.get("completion_tokens"):
        return int(usage["completion_tokens"])
    if answer.get("tokens") is not None:
        return int(answer["tokens"])
    calls = answer.get("tool_calls")
    text = (answer.get("content") or "") + (json.dumps(calls) if calls else "")
    return -(-len(text) // CHARS_PER_TOKEN)


def counted(answer: dict[str, Any], req: CacheRequest) -> dict[str, Any]:
    """`answer` with a token count when its usage has none (a curated answer): its length
    estimated, and no more than the limit it was stored under (whoever stored it with
    `max_tokens` K said it answers requests allowed K)."""
    limit = max_tokens(req)
    if limit is None or (answer.get("usage") or {}).get("completion_tokens"):
        return answer
    return {**answer, "tokens": min(answer_tokens(answer), limit)}


def answer_fits(answer: dict[str, Any], req: CacheRequest) -> bool:
    """Whether a stored answer answers `req` whole: no limit, or one it fits in."""
    limit = max_tokens(req)
    return limit is None or answer_tokens(answer) <= limit


def exact_key(req: CacheRequest, route_wide: bool = False) -> str:
    """sha256 of the canonical request: every message, every answer-changing field but the
    length limit (see LIMIT_FIELDS), scope."""
    body = {
        "messages": [canonical_message(m) for m in req.messages],
        "prompt": req.prompt,
        "params": {k: v for k, v in answer_params(req).items() if k not in LIMIT_FIELDS},
    }
    return _digest("exact", *scope(req, route_wide), canonical_json(body))


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def split_turn(text: str) -> tuple[str, str | None]:
    """(the part matched exactly, the question the semantic cache embeds) of a user turn.

    The embedder reads about 256 word pieces: a longer turn (a pasted document, then the
    question) would embed as its document alone, so two questions about one document would
    look identical. Such a turn is split at its last blank line: the document joins the
    exactly-matched context, the question is embedded and verified. A long turn without a
    short last paragraph has no question to embed (None: exact cache only)."""
    if len(text) <= QUESTION_MAX_CHARS:
        return "", text
    head, _, tail = text.strip().rpartition("\n\n")
    if head and tail.strip() and len(tail) <= QUESTION_MAX_CHARS:
        return head, tail
    return text, None


def _last_turn(req: CacheRequest) -> str | None:
    """The last user turn's text (or the prompt string); None when it is not the end."""
    if req.kind == "completion":
        return req.prompt if isinstance(req.prompt, str) else None
    i = last_user_index(req.messages)
    if i is None or i != len(req.messages) - 1:
        return None  # the request does not end with a user turn (e.g. a tool result)
    return message_text(req.messages[i])


def query_text(req: CacheRequest) -> str | None:
    """The text the semantic cache embeds: the last user turn (or the prompt string), or
    its question when it is long (`split_turn`)."""
    turn = _last_turn(req)
    return None if turn is None else split_turn(turn)[1]


TURN_SEP = "\n\u241e\n"  # between turns in a `semantic` context's verify text


def verify_text(req: CacheRequest, mode: ContextMode = "full") -> str | None:
    """What the guard compares: the question; in `semantic` context mode, the question then
    every earlier turn but system prompts, newest first, each as "role: text", joined by
    TURN_SEP: the guard reads the two conversations whole (their meaning must match, not
    their bytes), and a pair cut for length loses the oldest turns first."""
    question = query_text(req)
    if mode != "semantic" or question is None:
        return question
    i = last_user_index(req.messages)
    earlier = [f"{m.get('role')}: {message_text(m)}" for m in req.messages[:i or 0]
               if m.get("role") not in ("system", "developer")]
    return TURN_SEP.join([question, *reversed(earlier)])


def context_hash(req: CacheRequest, mode: ContextMode = "full") -> str:
    """Hash of what precedes the last user turn: all of it, only system prompts (also in
    `semantic` mode, plus the roles of the turns before), or nothing."""
    i = last_user_index(req.messages)
    before = req.messages[:i] if i is not None else list(req.messages)
    if mode == "semantic":
        roles = [m.get("role") for m in before if m.get("role") not in ("system", "developer")]
        before = [m for m in before if m.get("role") in ("system", "developer")]
        before.append({"role": "turns", "content": ",".join(map(str, roles))})
    elif mode == "system":
        before = [m for m in before if m.get("role") in ("system", "developer")]
    elif mode == "none":
        before = []
    turn = _last_turn(req)
    document = split_turn(turn)[0] if turn is not None else ""  # whatever the mode
    return _digest("context", canonical_json([canonical_message(m) for m in before]), document)


def partition_key(req: CacheRequest, mode: ContextMode = "full", route_wide: bool = False) -> str:
    """The semantic partition: scope + the params that shape an answer (tools, format, stop)
    + the context hash."""
    shaping = {k: v for k, v in answer_params(req).items() if k not in SAMPLING_FIELDS}
    return _digest("partition", *scope(req, route_wide), canonical_json(shaping),
                   context_hash(req, mode))[:32]
