"""The semantic cache: the last user turn's embedding, searched within its partition.

The partition (scope + answer-changing params + a hash of the context before the last user
turn) must match exactly, so two conversations never share an entry. Candidates pass the
guard before they are served. Per-entry adaptive thresholds: when an entry lands next to a
close neighbour that is a different question, both entries raise their own bar to just above
that similarity, so a lookup between them cannot be served by cosine alone.

With a shared store (Redis) every replica keeps its local index in step with the store by
polling its change feed; a feed gap (Redis restarted, replica disconnected) reloads all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

from cache.guard import Guard, Verdict, swapped_words, synonym_pairs, to_verify
from cache.index import IndexedEntry, VectorIndex
from cache.keys import CacheRequest, partition_key, query_text
from cache.settings import CacheSettings
from cache.stores.base import CacheEntry, CacheStore, IndexEvent, StoreUnavailable

log = logging.getLogger("headstart.cache")
NEIGHBOURS = 4
ADAPTIVE_MARGIN = 0.01


@dataclass
class SemanticResult:
    entry: CacheEntry | None = None
    similarity: float | None = None
    rejections: int = 0  # candidates over the threshold that the guard turned down
    vector: np.ndarray | None = None  # the query's embedding, reused when storing


def not_cacheable(req: CacheRequest, settings: CacheSettings) -> str | None:
    """Why the semantic cache must not serve/store `req`, or None when it may."""
    if not settings.semantic_enabled:
        return "disabled"
    if req.temperature > settings.max_temperature:
        return "temperature"
    if req.has_tools and not settings.allow_tools:
        return "tools"
    if not query_text(req):
        return "no_user_turn"
    return None


class SemanticCache:
    def __init__(self, store: CacheStore, embedder, guard: Guard | None = None,
                 index: VectorIndex | None = None) -> None:
        self.store, self.embedder = store, embedder
        self.guard = guard or Guard()
        self.index = index or VectorIndex(dim=384)
        self._sync_task: asyncio.Task | None = None

    async def embed(self, text: str) -> np.ndarray:
        return (await self.embedder.embed([text]))[0]

    async def lookup(self, req: CacheRequest, settings: CacheSettings, *,
                     max_age_s: float | None = None) -> SemanticResult:
        text = query_text(req) or ""
        vector = await self.embed(text)
        result = SemanticResult(vector=vector)
        partition = partition_key(req, settings.context)
        floor = min(settings.threshold, self.guard.config.lexical_floor) if settings.guard \
            else settings.threshold
        for cand in self.index.search(partition, vector, k=NEIGHBOURS):
            if cand.similarity < floor:
                break
            own = cand.entry.threshold if settings.adaptive else None
            bar = max(settings.threshold, own or 0.0)
            if settings.guard:
                ok = (await self.verify(cand.entry.question, text, cand.similarity, bar,
                                        learned=settings.verifier)).ok
            else:
                ok = cand.similarity >= bar
            if not ok:
                result.rejections += cand.similarity >= settings.threshold
                continue
            entry = await self.store.get(cand.entry.key)
            now = time.time()
            if entry is None or not entry.semantic_expires_at or entry.semantic_expires_at <= now:
                self.index.remove(cand.entry.key)
                continue
            if max_age_s is not None and now - entry.created_at > max_age_s:
                continue
            result.entry, result.similarity = entry, cand.similarity
            return result
        return result

    async def verify(self, cached: str, new: str, similarity: float, bar: float,
                     learned: bool = False) -> Verdict:
        """The guard's verdict; when the two differ by a word or two swapped for others, the
        words' own embeddings decide which are synonyms (one small extra embedding call);
        with `learned`, a rewording the word rules cannot match goes to the learned verifier,
        which reads both questions' word pieces in context (cache/verifier.py)."""
        verdict = self.guard.check(cached, new, similarity, bar)
        if (swap := swapped_words(verdict)) is not None:
            a, b = swap
            vecs = await self.embedder.embed(a + b)
            same = synonym_pairs(a, b, vecs[:len(a)] @ vecs[len(a):].T,
                                 self.guard.config.synonym_cosine)
            if same:
                verdict = self.guard.check(cached, new, similarity, bar, same=same)
        if learned and (signals := to_verify(verdict)) is not None \
                and hasattr(self.embedder, "tokens"):
            signals = signals.with_pieces(await self.embedder.tokens(cached),
                                          await self.embedder.tokens(new))
            verdict = self.guard.verified(signals) or verdict
        return verdict

    def attach(self, entry: CacheEntry, req: CacheRequest, settings: CacheSettings,
               vector: np.ndarray, ttl_s: float | None = None) -> None:
        """Give `entry` its semantic part (partition, question, vector, expiry)."""
        entry.partition = partition_key(req, settings.context)
        entry.question = query_text(req)
        entry.vector = np.asarray(vector, dtype=np.float32)
        entry.semantic_expires_at = entry.created_at + (ttl_s or settings.semantic_ttl_s)

    def apply(self, event: IndexEvent) -> None:
        """Apply one index event (local write or another replica's, via the feed)."""
        if event.op == "del":
            self.index.remove(event.key)
            return
        if not event.partition or event.vector is None or not event.question:
            return
        if event.key in self.index:
            return
        entry = IndexedEntry(event.key, event.partition, event.question, event.expires_at or 0.0)
        for n in self.index.search(event.partition, event.vector, k=NEIGHBOURS):
            if n.similarity >= 0.999 or n.entry.question == entry.question:
                continue
            if not self.guard.check(n.entry.question, entry.question, n.similarity, 1.1).ok:
                bar = min(0.999, n.similarity + ADAPTIVE_MARGIN)
                entry.threshold = max(entry.threshold or 0.0, bar)
                n.entry.threshold = max(n.entry.threshold or 0.0, bar)
        self.index.add(entry, event.vector)

    # ------------------------------------------------------------------ replica sync

    async def reload(self) -> None:
        events = await self.store.index_snapshot()
        self.index.clear()
        for event in events:
            self.apply(event)
        log.info("semantic index loaded: %d entries", len(self.index))

    async def sync_once(self) -> None:
        changes = await self.store.index_changes()
        if changes is None:
            await self.reload()
            return
        for event in changes:
            self.apply(event)

    def start_sync(self, interval_s: float = 0.25) -> None:
        if self.store.shared and self._sync_task is None:
            self._sync_task = asyncio.create_task(self._sync_loop(interval_s))

    async def _sync_loop(self, interval_s: float) -> None:
        while True:
            try:
                await self.sync_once()
            except StoreUnavailable:
                pass  # the store logs outages; the next successful poll reloads
            except Exception:
                log.exception("semantic index sync failed")
            await asyncio.sleep(interval_s)

    async def close(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
            try:
                await self._sync_task
            except asyncio.CancelledError:
                pass
            self._sync_task = None
