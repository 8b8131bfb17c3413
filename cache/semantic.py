"""The semantic cache: the last user turn's embedding, searched within its partition.

The partition (scope + answer-changing params + a hash of the context before the last user
turn) must match exactly, so two conversations never share an entry; in `semantic` context
mode only the system prompt and the number of earlier user turns must match exactly, and
the guard reads the earlier user turns with the question (`keys.verify_text`). A request
with a tenant also searches the route-wide partition, where entries stored without a tenant
(curated answers) live. With the guard on, an entry whose question reads the same once
normalised (case, punctuation, fillers) is served first, found by its normal form without
an embedding (no `x-cache-similarity` then). Next, the entry sharing at least half its key
words with the question (content-word stems and numbers) goes to the guard before any
embedding: a rewording that keeps most words is served without one (again no
`x-cache-similarity`). Otherwise candidates over the route's cosine floor go to the guard
(exact checks, then the pair verifier), the nearest first. A lookup whose partitions hold no
entry it has not read embeds nothing: storing the answer embeds the question, after the
answer is sent.

On a route with a judge, each candidate needs the score its entry's judged evidence allows
(cache/budget.py: the threshold, or lower), a question judged "no" against an entry is never
served it (`refused`), and the best candidate the verifier scored over the route's floor but
under that bar comes back as the lookup's grey-zone candidate (cache/grey.py).

With a shared store (Redis) every replica keeps its local index in step with the store by
polling its change feed; a feed gap (Redis restarted, replica disconnected) reloads all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

from cache.budget import Budgets
from cache.grey import GreyCandidate, better, judged_verdicts
from cache.guard import Guard, Verdict, same_text
from cache.index import IndexedEntry, Neighbour, VectorIndex
from cache.keys import TURN_SEP, CacheRequest, answer_fits, partition_key, query_text, verify_text
from cache.question import form_key, key_words
from cache.settings import CacheSettings
from cache.stores.base import CacheEntry, CacheStore, IndexEvent, StoreUnavailable

log = logging.getLogger("headstart.cache")
NEIGHBOURS = 3  # candidates read by the verifier at most
LEXICAL_OVERLAP = 0.5  # key words a candidate found without an embedding must share (Jaccard)


@dataclass
class SemanticResult:
    entry: CacheEntry | None = None
    similarity: float | None = None
    rejections: int = 0  # candidates over the floor that the guard turned down
    vector: np.ndarray | None = None  # the query's embedding, reused when storing
    verdict: Verdict | None = None  # the served candidate's
    grey: GreyCandidate | None = None  # a route with a judge: the candidate to judge


def lexical_first(settings: CacheSettings, text: str) -> bool:
    """Whether a lookup of `text` looks for a neighbour by its key words before embedding:
    with the guard on at the default floor, for a question (not a conversation)."""
    return settings.guard and settings.threshold is None and TURN_SEP not in text


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
        self.budgets = Budgets()  # per route: how far judged evidence lowers the bar
        self._sync_task: asyncio.Task | None = None

    async def embed(self, text: str) -> np.ndarray:
        return (await self.embedder.embed([text]))[0]

    def candidates(self, parts: list[str], settings: CacheSettings, vector: np.ndarray,
                   text: str) -> list[Neighbour]:
        """Entries over the floor in the request's partitions `parts`, most similar first;
        under the floor, only one that reads the same once normalised ("um what is the
        capital of france": fillers, case and punctuation cut MiniLM's cosine more than its
        meaning, and a clause moved to the other end is not found by its normal form)."""
        found = [n for part in parts for n in self.index.search(part, vector, k=NEIGHBOURS)]
        found.sort(key=lambda n: -n.similarity)
        return [n for n in found if n.similarity >= settings.floor
                or (settings.guard and same_text(n.entry.question, text))][:NEIGHBOURS]

    @staticmethod
    def partitions(req: CacheRequest, settings: CacheSettings) -> list[str]:
        """The request's partition, and the route-wide one when the request has a tenant."""
        parts = [partition_key(req, settings.context)]
        if req.tenant:
            parts.append(partition_key(req, settings.context, route_wide=True))
        return parts

    async def repeat(self, req: CacheRequest, parts: list[str], text: str,
                     max_age_s: float | None) -> SemanticResult | None:
        """A usable entry of `parts` whose question reads the same as `text` once
        normalised, found by its normal form without an embedding (guard on: the guard
        would pass it unread)."""
        form = form_key(text)
        for part in parts:
            for indexed in self.index.same_text(part, form):
                if (entry := await self._usable(indexed, req, max_age_s)) is not None:
                    return SemanticResult(entry=entry, verdict=Verdict(True, "same_text"))
        return None

    async def lookup(self, req: CacheRequest, settings: CacheSettings, *,
                     max_age_s: float | None = None, need_vector: bool = False
                     ) -> SemanticResult:
        """The entry to serve, if any, and the question's embedding when one was made (always
        with `need_vector`; otherwise not when the partitions hold no entry left to read)."""
        text = verify_text(req, settings.context) or ""
        parts = self.partitions(req, settings)  # hashes the context: once a lookup
        if settings.guard and (found := await self.repeat(req, parts, text, max_age_s)):
            return found
        result = SemanticResult()
        near = self.lexical(parts, settings, text)
        if near and await self._serve([Neighbour(near, None)], req, text, settings,
                                      max_age_s, result):
            return result
        others = sum(self.index.count(part) for part in parts) - (
            near is not None and near.key in self.index)  # (`_usable` drops a stale one)
        if not need_vector and others <= 0:
            return result  # nothing left to find: the store embeds the question, after the answer
        result.vector = await self.embed(query_text(req) or "")
        cands = [c for c in self.candidates(parts, settings, result.vector, text)
                 if near is None or c.entry.key != near.key]  # `near` was read already
        cands = cands[:NEIGHBOURS - (near is not None)]  # NEIGHBOURS read in all, at most
        # the nearest candidate first: a hit reads one pair; the rest only when it fails
        for batch in (cands[:1], cands[1:]):
            if batch and await self._serve(batch, req, text, settings, max_age_s, result):
                break
        return result

    def lexical(self, parts: list[str], settings: CacheSettings,
                text: str) -> IndexedEntry | None:
        """The entry of `parts` sharing the most key words with `text`, when it shares at
        least LEXICAL_OVERLAP of them: read by the verifier before the question is embedded,
        it makes a hit on a rewording that keeps most words about 6 ms cheaper. Guard on at
        the default floor only: a route that set its own cosine floor gets candidates by
        cosine alone."""
        if not lexical_first(settings, text):
            return None
        words = key_words(text)
        found = [e for part in parts if (e := self.index.lexical(part, words, LEXICAL_OVERLAP))]
        return found[0] if found else None

    async def _serve(self, batch: list[Neighbour], req: CacheRequest, text: str,
                     settings: CacheSettings, max_age_s: float | None,
                     result: SemanticResult) -> bool:
        """Whether a candidate of `batch` passed the guard and fits `req`: the first that
        does goes into `result`, every one the guard turned down counts a rejection."""
        if settings.guard and settings.judge:
            verdicts = await self._judged(batch, text, settings, result)
        elif settings.guard:
            verdicts = await self.verify([c.entry.question for c in batch], text,
                                          settings.verifier_threshold)
        else:
            verdicts = [Verdict(True, "verified") for _ in batch]
        for cand, verdict in zip(batch, verdicts, strict=True):
            if not verdict.ok:
                result.rejections += 1
                continue
            entry = await self._usable(cand.entry, req, max_age_s)
            if entry is not None:
                result.entry, result.similarity, result.verdict = \
                    entry, cand.similarity, verdict
                return True
        return False

    async def _judged(self, batch: list[Neighbour], text: str, settings: CacheSettings,
                      result: SemanticResult) -> list[Verdict]:
        """`grey.judged_verdicts` on this cache's index and guard; the grey-zone candidate
        to judge, if any, goes into `result.grey`."""
        budget = self.budgets.route(settings.route, settings.max_false_hit_rate)
        verdicts, grey = await judged_verdicts(
            [(c.entry, self.owner(c.entry)) for c in batch], text, settings, budget,
            self.guard.threshold(settings.verifier_threshold, TURN_SEP in text), self.verify)
        if grey is not None:
            result.grey = better(result.grey, grey)
        return verdicts

    def owner(self, indexed: IndexedEntry) -> IndexedEntry:
        """The entry whose evidence decides a candidate: an alias's own entry, when this
        replica's index holds it, else the candidate itself."""
        if indexed.alias_of is None:
            return indexed
        return self.index.get(indexed.alias_of) or indexed

    async def _usable(self, indexed: IndexedEntry, req: CacheRequest,
                      max_age_s: float | None) -> CacheEntry | None:
        """The indexed entry as stored, when it is live, young enough and fits `req`."""
        entry = await self.store.get(indexed.key)
        now = time.time()
        if entry is None or not entry.semantic_expires_at or entry.semantic_expires_at <= now:
            self.index.remove(indexed.key)
            return None
        if max_age_s is not None and now - entry.created_at > max_age_s:
            return None
        return entry if answer_fits(entry.answer, req) else None

    async def verify(self, cached: list[str], new: str, threshold: float | None,
                      bars: list[float] | None = None) -> list[Verdict]:
        """The guard's verdicts, on the embedder's worker (the verifier is a model too)."""
        run = getattr(self.embedder, "run", None)
        if run is None:
            return self.guard.check_many(cached, new, threshold, bars)
        return await run(self.guard.check_many, cached, new, threshold, bars)

    def attach(self, entry: CacheEntry, req: CacheRequest, settings: CacheSettings,
               vector: np.ndarray, ttl_s: float | None = None) -> None:
        """Give `entry` its semantic part (partition, question, vector, expiry)."""
        entry.partition = partition_key(req, settings.context)
        entry.question = verify_text(req, settings.context)
        entry.form = form_key(entry.question or "")
        entry.vector = np.asarray(vector, dtype=np.float32)
        entry.semantic_expires_at = entry.created_at + (ttl_s or settings.semantic_ttl_s)

    def apply(self, event: IndexEvent) -> None:
        """Apply one index event (local write or another replica's, via the feed)."""
        if event.op == "del":
            self.index.remove(event.key)
            return
        if not event.partition or event.vector is None or not event.question:
            return
        if (indexed := self.index.get(event.key)) is not None:
            if event.alias_of or event.evidence or indexed.alias_of or indexed.evidence:
                indexed.alias_of, indexed.evidence = event.alias_of, event.evidence  # judged
            return
        entry = IndexedEntry(event.key, event.partition, event.question, event.expires_at or 0.0,
                             event.form)
        if event.alias_of or event.evidence:  # judged: see IndexedEntry
            entry.alias_of, entry.evidence = event.alias_of, event.evidence
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
