"""A cache entry, and the interface every store offers.

One entry serves both caches: it lives under its exact key (the exact cache reads it
directly); when it also carries a semantic partition and a vector, the semantic index points
at the same key. Stores hold JSON-able answers (`Answer.to_dict()`), never gateway objects.
A question a judge promoted is an alias: an entry of its own (its exact key, its embedding in
its own partition) holding a copy of the answer of the entry it points at (`alias_of`), and
never outliving it. An entry's judged outcomes (`evidence`) live in its meta.
Stores report failures by raising `StoreUnavailable`; the caches turn that into a miss.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from cache.evidence import Evidence


class StoreUnavailable(RuntimeError):
    """The store could not answer in time (Redis down or slow)."""


@dataclass
class CacheEntry:
    key: str  # the exact key
    route: str
    answer: dict[str, Any]
    namespace: str | None = None
    tenant: str | None = None
    created_at: float = field(default_factory=time.time)
    exact_expires_at: float | None = None  # None: not served by the exact cache
    partition: str | None = None  # semantic partition; None: not in the semantic index
    question: str | None = None  # the last user turn, for the guard
    vector: np.ndarray | None = None  # float32 [dim], L2-normalised
    semantic_expires_at: float | None = None
    source: str = "upstream"  # or "admin" (curated)
    form: int | None = None  # cache.question.form_key(question), for the semantic index
    # set on an alias or a judged entry only (plain class attributes, not fields: an entry
    # nobody judged holds and stores nothing more than before)
    alias_of = None  # str: a promoted question: the key of the entry whose answer it serves
    evidence = None  # Evidence: what judges said of candidates of this entry

    @property
    def expires_at(self) -> float:
        return max(self.exact_expires_at or 0.0, self.semantic_expires_at or 0.0)

    def meta(self) -> dict[str, Any]:
        """Everything but the answer and the vector (small; JSON-able)."""
        return {
            "key": self.key, "route": self.route, "namespace": self.namespace,
            "tenant": self.tenant, "created_at": self.created_at,
            "exact_expires_at": self.exact_expires_at, "partition": self.partition,
            "question": self.question, "semantic_expires_at": self.semantic_expires_at,
            "source": self.source, "form": self.form,
            **({"alias_of": self.alias_of} if self.alias_of else {}),
            **({"evidence": self.evidence.to_meta()} if self.evidence is not None else {}),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any], answer: dict[str, Any],
                  vector: np.ndarray | None = None) -> CacheEntry:
        fields = {k: meta.get(k) for k in (
            "key", "route", "namespace", "tenant", "exact_expires_at", "partition", "question",
            "semantic_expires_at", "form")}
        entry = cls(answer=answer, vector=vector, created_at=meta.get("created_at") or 0.0,
                    source=meta.get("source") or "upstream", **fields)
        if meta.get("alias_of") or meta.get("evidence"):
            entry.alias_of = meta.get("alias_of")
            entry.evidence = Evidence.from_meta(meta.get("evidence"))
        return entry


@dataclass
class IndexEvent:
    """A change to the semantic index: an entry added (with its vector) or removed."""

    op: str  # "put" | "del"
    key: str
    partition: str | None = None
    question: str | None = None
    vector: np.ndarray | None = None
    expires_at: float | None = None
    form: int | None = None
    alias_of: str | None = None
    evidence: Evidence | None = None

    @classmethod
    def of(cls, entry: CacheEntry) -> IndexEvent:
        return cls("put", entry.key, entry.partition, entry.question, entry.vector,
                   entry.semantic_expires_at, entry.form, entry.alias_of, entry.evidence)


def vector_to_str(vec: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vec, dtype=np.float32).tobytes()).decode()


def vector_from_str(data: str | bytes | None) -> np.ndarray | None:
    if not data:
        return None
    return np.frombuffer(base64.b64decode(data), dtype=np.float32).copy()


class CacheStore(Protocol):
    """What the caches need from a store. Every method may raise `StoreUnavailable`."""

    shared: bool  # True when other processes see the same entries (Redis)

    async def get(self, key: str) -> CacheEntry | None: ...

    async def put(self, entry: CacheEntry) -> None: ...

    async def delete(self, keys: list[str]) -> int: ...

    async def annotate(self, entry: CacheEntry) -> None:
        """Rewrite a stored entry's meta (its judged evidence) and tell every replica's
        index, leaving its answer, vector and expiry as they are."""
        ...

    async def metas(self) -> list[dict[str, Any]]:
        """Metadata of every live entry (admin purge and stats; not on the request path)."""
        ...

    async def index_snapshot(self) -> list[IndexEvent]:
        """Every live semantic entry, to build a replica's index from scratch."""
        ...

    async def index_changes(self) -> list[IndexEvent] | None:
        """Index events since the last call; None when the replica must reload everything."""
        ...

    async def close(self) -> None: ...
