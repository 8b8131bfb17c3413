"""What a judgement changes: the entry's evidence, an alias or a refusal, the route's budget
and the labelled-pairs log.

A "yes" makes the new question an alias of the entry: its own exact key (the canonical
request, so repeats hit at once), its embedding in its own partition (so close rewordings of
it find it), a copy of the entry's answer, `alias_of` the entry, expiring with the entry at
the latest (the answer is as old as the entry: `created_at` is the entry's, and `max-age`
reads it). The alias lives in the new question's scope (tenant, namespace, route, context):
a question asked by one tenant of a route-wide curated answer is that tenant's alias only.
A "no" refuses the question's normal form on the entry: never served it again, whatever the
threshold. Both count on the entry's evidence, which is written back to the store (every
replica's index reads it from the feed), and in the route's budget; every judgement is
appended to the route's labelled-pairs log.
"""

from __future__ import annotations

import time
from typing import Literal

from cache.evidence import Evidence, band_of
from cache.grey import GreyPair
from cache.judgement import Judgement
from cache.keys import exact_key, query_text, verify_text
from cache.labels import LabelLog, label
from cache.question import form_key
from cache.semantic import SemanticCache
from cache.stats import CacheStats
from cache.stores.base import CacheEntry, CacheStore, IndexEvent

Applied = Literal["promoted", "refused"]


class Promoter:
    """`apply(pair, entry, judgement, score)`: the judgement's effects, in the store first."""

    def __init__(self, store: CacheStore, semantic: SemanticCache, stats: CacheStats,
                 labels: LabelLog | None = None) -> None:
        self.store, self.semantic, self.stats = store, semantic, stats
        self.labels = labels or LabelLog()

    async def apply(self, pair: GreyPair, entry: CacheEntry, judgement: Judgement,
                    score: float) -> Applied:
        """Count the judgement on `entry` (the pair's entry as stored now, at the score the
        verifier gave the pair in both orders), then alias or refuse the new question."""
        settings, new = pair.settings, verify_text(pair.req, pair.settings.context) or ""
        band = band_of(score)
        evidence = entry.evidence or Evidence()
        eligible = evidence.loosens(band)  # before this judgement counts
        evidence.record(band, judgement.same, None if judgement.same else form_key(new))
        entry.evidence = evidence
        await self.store.annotate(entry)
        if (indexed := self.semantic.index.get(entry.key)) is not None:
            indexed.evidence = evidence
        self.semantic.budgets.route(settings.route, settings.max_false_hit_rate) \
            .record_judgement(band, judgement.same, eligible)
        if judgement.same:
            await self._alias(pair, entry)
        self.stats.record(settings.route, "promotions" if judgement.same else "refusals")
        if settings.labels:
            await self.labels.append(settings.labels, label(
                settings.route, pair.candidate.question, new, judgement, score))
        return "promoted" if judgement.same else "refused"

    async def _alias(self, pair: GreyPair, entry: CacheEntry) -> None:
        """Store the new question as an alias of `entry`, in its own scope and partition,
        replacing the answer its miss stored under the same key."""
        req, settings = pair.req, pair.settings
        vector = pair.vector
        if vector is None:
            vector = await self.semantic.embed(query_text(req) or "")
        alias = CacheEntry(key=exact_key(req), route=req.route, answer=entry.answer,
                           namespace=req.namespace, tenant=req.tenant,
                           created_at=entry.created_at, source="alias")
        alias.alias_of = entry.key
        if settings.exact_enabled:
            alias.exact_expires_at = min(entry.expires_at,
                                         time.time() + settings.exact_ttl_s)
        self.semantic.attach(alias, req, settings, vector)
        alias.semantic_expires_at = min(alias.semantic_expires_at or 0.0, entry.expires_at)
        if alias.expires_at <= time.time():
            return  # the entry expires before the alias could serve
        await self.store.put(alias)
        self.semantic.index.remove(alias.key)  # the miss's own entry, under the same key
        self.semantic.apply(IndexEvent.of(alias))
