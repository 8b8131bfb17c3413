"""Pipeline stage: exact + semantic cache lookups and stores, adapting `RequestContext` to
`cache/` (which knows nothing of HTTP or the gateway's config).

`lookup` returns a `CacheLookup`: the status (`exact | semantic | miss | bypass`), the
similarity of a semantic hit, why a lookup was skipped, and the answer on a hit. A cache
failure never fails a request: lookups become misses, stores are skipped. On a route with a
judge, a miss's grey-zone candidate is kept until `store`, which offers the pair to the
judge queue (gateway/judge_queue.py) once the answer is written and its store scheduled.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from cache.grey import GreyCandidate, GreyPair
from cache.keys import CacheRequest
from cache.response_cache import ResponseCache
from cache.settings import CacheSettings
from gateway.context import Answer, CacheLookup, RequestContext
from gateway.judge_queue import JudgeQueue
from gateway.judges import busy_check, route_queues
from openai_api import ChatCompletionRequest, CompletionRequest

if TYPE_CHECKING:
    from gateway.config import GatewayConfig, RouteConfig
    from gateway.upstream_call import UpstreamCaller

log = logging.getLogger("headstart.gateway")
_PENDING_VECTORS = 4096  # query embeddings kept from lookup to store, per process


def settings_for(route: RouteConfig) -> CacheSettings:
    """The route's YAML cache policy as `cache/`'s plain settings."""
    exact, sem, judge = route.cache.exact, route.cache.semantic, route.cache.semantic.judge
    return CacheSettings(
        route=route.name, exact_enabled=exact.enabled, exact_ttl_s=exact.ttl_s,
        exact_allow_tools=exact.allow_tools,
        semantic_enabled=sem.enabled, threshold=sem.threshold,
        verifier_threshold=sem.verifier_threshold, semantic_ttl_s=sem.ttl_s,
        max_temperature=sem.max_temperature, context=sem.context, allow_tools=sem.allow_tools,
        guard=sem.guard, adaptive_skip=sem.adaptive_skip,
        judge=None if judge is None else "agreement" if judge.agreement
        else f"upstream:{judge.upstream}",
        judge_floor=judge.floor if judge is not None else 0.2,
        max_false_hit_rate=sem.max_false_hit_rate,
        labels=None if judge is None else judge.labels or f"headstart-labels/{route.name}.jsonl")


def cache_request(ctx: RequestContext, config: GatewayConfig | None,
                  namespace: str | None = None) -> CacheRequest:
    """The request as plain data. The model is what answers: the upstream's model name
    when the upstream sets one (every client alias of a route shares entries), else the
    client's."""
    body = ctx.body.model_dump(exclude_none=True)
    upstream = config.upstreams.get(ctx.route.upstream) if config is not None else None
    model = (upstream.model if upstream is not None and upstream.model else None) or ctx.body.model
    honour_ns = ctx.route.cache.namespace_header
    return CacheRequest(
        route=ctx.route.name, model=model, kind=ctx.kind,
        messages=body.pop("messages", []) if ctx.kind == "chat" else [],
        prompt=body.pop("prompt", None), params=body, tenant=ctx.tenant,
        namespace=namespace if namespace is not None else (ctx.namespace if honour_ns else None))


class CacheStage:
    def __init__(self, cache: ResponseCache | None, config: GatewayConfig | None = None) -> None:
        self.cache = cache
        self.config = config
        self._settings: dict[str, CacheSettings] = {}
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._grey: OrderedDict[str, GreyCandidate] = OrderedDict()  # from lookup to store
        self.judges: JudgeQueue | None = None  # set by `start_judging` when a route has one

    @classmethod
    async def create(cls, config: GatewayConfig) -> CacheStage:
        if not any(r.caching_enabled() for r in config.routes) and not config.redis:
            return cls(None, config)  # caching off everywhere: no store, no model
        cache = await ResponseCache.open(config.redis)
        if any(r.cache.semantic.enabled for r in config.routes):
            embedder = cache.semantic.embedder  # loads where it will encode (its `run`)
            await embedder.run(embedder.embed_sync, ["warm up"])
        return cls(cache, config)

    def start_judging(self, caller: UpstreamCaller) -> None:
        """Start the judge queue when some route's semantic cache names a judge (its
        upstream judges ask through `caller`)."""
        if self.cache is None or self.config is None or self.judges is not None:
            return
        queues = route_queues(self.config, self.cache, caller)
        if queues:
            self.judges = JudgeQueue(self.cache, queues, busy_check(self.config, caller))
            self.judges.start()

    def settings(self, route: RouteConfig) -> CacheSettings:
        found = self._settings.get(route.name)
        if found is None:
            found = self._settings[route.name] = settings_for(route)
        return found

    async def lookup(self, ctx: RequestContext) -> CacheLookup:
        settings = self.settings(ctx.route)
        if self.cache is None or not settings.enabled:
            return CacheLookup("bypass", skipped="disabled" if self.cache is not None else None)
        if (why := _bypass_reason(ctx)) is not None:
            self.cache.stats.record(settings.route, "bypasses")
            return CacheLookup("bypass", skipped=why)
        req = cache_request(ctx, self.config)
        result = await self.cache.lookup(req, settings, max_age_s=ctx.cache_control.max_age_s)
        if result.vector is not None and result.status == "miss":
            self._remember(self._vectors, ctx.request_id, result.vector)
        if result.grey is not None:
            self._remember(self._grey, ctx.request_id, result.grey)
        if result.answer is None:
            return CacheLookup(result.status, result.similarity, result.skipped)
        try:
            answer = Answer.from_dict(result.answer)
        except Exception:  # an unreadable entry is a miss, never an error
            log.warning("unreadable cache entry for %s; serving a miss", ctx.request_id)
            return CacheLookup("miss", skipped=result.skipped)
        return CacheLookup(result.status, result.similarity, result.skipped, answer)

    async def store(self, ctx: RequestContext, answer: Answer) -> None:
        """Store the answer once it is written: a task of its own runs the store (an
        embedding where the lookup made none, the store's writes), off the request's path."""
        vector = self._vectors.pop(ctx.request_id, None)
        grey = self._grey.pop(ctx.request_id, None) if self._grey else None
        settings = self.settings(ctx.route)
        if self.cache is None or not settings.enabled or ctx.cache_control.no_store:
            return
        if not answer.cacheable() or _bypass_reason(ctx) not in (None, "no-cache"):
            return  # an entry cannot hold it (several choices, logprobs, non-text parts)
        req, stored = cache_request(ctx, self.config), answer.to_dict()
        self.cache.store_soon(req, stored, settings, vector=vector)
        if grey is not None and self.judges is not None:
            self.judges.offer(GreyPair(req, settings, grey, stored, vector))

    @staticmethod
    def _remember(kept: OrderedDict, request_id: str, value: object) -> None:
        kept[request_id] = value
        while len(kept) > _PENDING_VECTORS:
            kept.popitem(last=False)

    def stats_snapshot(self) -> dict[str, dict[str, float]]:
        """The cache's counters per route ({} when caching is off everywhere); a route with
        a judge adds its error budget's `false_hit_estimate` and `judged_bar`."""
        if self.cache is None:
            return {}
        found: dict[str, dict[str, float]] = dict(self.cache.stats.snapshot())
        guard = self.cache.semantic.guard
        for route, (estimate, bar) in self.cache.semantic.budgets.snapshot().items():
            config = self.config.route(route) if self.config is not None else None
            shipped = guard.threshold(config.cache.semantic.verifier_threshold if config
                                      else None)
            found[route] = {**found.get(route, {}), "false_hit_estimate": estimate,
                            "judged_bar": min(shipped, bar) if bar is not None else shipped}
        return found

    async def close(self) -> None:
        if self.judges is not None:
            await self.judges.close()
        if self.cache is not None:
            await self.cache.close()


def _bypass_reason(ctx: RequestContext) -> str | None:
    """Why this request skips the caches: the client said `no-cache`, or an entry cannot hold
    its answer (several choices, log-probabilities, non-text parts: the caches match text, so
    an image's question must not be served another image's answer); None when it may be
    looked up."""
    if ctx.cache_control.no_cache:
        return "no-cache"
    if ctx.body.choice_count() != 1:
        return "n"
    if ctx.body.logprobs_count() is not None:
        return "logprobs"
    if _has_non_text_parts(ctx.body):
        return "non-text"
    return None


def _has_non_text_parts(request: ChatCompletionRequest | CompletionRequest) -> bool:
    return any(isinstance(m.content, list) and any(p.get("type") != "text" for p in m.content)
               for m in getattr(request, "messages", ()))
