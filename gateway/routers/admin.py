"""Cache admin API (`Authorization: Bearer <admin_key>`): curated entries, purge, stats.

Curated entries are stored exactly as the route would store its own answer to those
messages (same keys, same partition), in both caches, so companies can preload FAQ answers.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field, ValidationError

from cache.keys import exact_key
from gateway.auth import require_admin
from gateway.cache_stage import CacheStage, cache_request
from gateway.context import Answer, RequestContext
from gateway.deps import CacheStageDep, ConfigDep
from openai_api import APIError, ChatCompletionRequest, ChatMessage, Usage, from_pydantic

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])


class CuratedEntry(BaseModel):
    route: str
    messages: list[ChatMessage] = Field(min_length=1)
    response: str | dict[str, Any]  # the answer text, or a chat.completion / Answer object
    namespace: str | None = None
    tenant: str | None = None  # the tenant whose requests it serves (None: open gateway)
    ttl_s: float | None = Field(default=None, gt=0)
    params: dict[str, Any] = Field(default_factory=dict)  # sampling params to key it under


def enabled_cache(stage: CacheStageDep) -> CacheStage:
    """The cache stage, when some route caches (409 otherwise)."""
    if stage.cache is None:
        raise APIError(409, "Caching is off on this gateway: enable a route's cache first",
                       code="cache_disabled")
    return stage


EnabledCacheDep = Annotated[CacheStage, Depends(enabled_cache)]


def _answer(response: str | dict[str, Any], model: str) -> Answer:
    """The entry's answer; 400 when `response` is none of the shapes it may take."""
    if isinstance(response, str):
        return Answer(kind="chat", model=model, content=response, finish_reason="stop",
                      usage=Usage())
    try:
        if "choices" in response:  # a chat.completion object
            message = (response.get("choices") or [{}])[0].get("message") or {}
            content = message.get("content") or ""
            if not isinstance(content, str):
                raise TypeError("content")
            return Answer(kind="chat", model=model, content=content, finish_reason="stop",
                          usage=Usage())
        answer = Answer.from_dict({"kind": "chat", "model": model, "finish_reason": "stop",
                                   **response})
        if not isinstance(answer.content, str):
            raise TypeError("content")
        return answer
    except (KeyError, IndexError, TypeError, AttributeError, ValidationError):
        raise APIError(400, "response must be the answer's text, a chat.completion object, "
                       "or an answer object with a string `content`",
                       param="response") from None


@router.post("/cache/entries")
async def put_entry(request: Request, stage: EnabledCacheDep,
                    config: ConfigDep) -> dict[str, Any]:
    try:
        entry = CuratedEntry.model_validate_json(await request.body())
    except ValidationError as e:
        raise from_pydantic(e) from None
    route = config.route(entry.route)
    if route is None:
        raise APIError(404, f"Unknown route {entry.route!r}", param="route",
                       code="route_not_found")
    model = next((m for m in route.models if not any(c in m for c in "*?[")), route.name)
    params = {k: v for k, v in entry.params.items() if k not in ("model", "messages")}
    try:
        body = ChatCompletionRequest(model=model, messages=entry.messages, **params)
    except ValidationError as e:
        raise from_pydantic(e) from None
    ctx = RequestContext(request_id=f"admin-{uuid.uuid4().hex[:12]}", kind="chat", body=body,
                         route=route, tenant=entry.tenant, namespace=entry.namespace)
    req = cache_request(ctx, stage.config, namespace=entry.namespace)
    answer = _answer(entry.response, model)
    stored = await stage.cache.store(req, answer.to_dict(), stage.settings(route),
                                     ttl_s=entry.ttl_s, source="admin", force=True)
    if not stored:
        raise APIError(503, "The cache store is unavailable; entry not stored",
                       code="cache_unavailable")
    return {"stored": True, "key": exact_key(req), "route": route.name,
            "namespace": entry.namespace}


@router.delete("/cache")
async def purge(stage: EnabledCacheDep, route: str | None = None,
                namespace: str | None = None, key: str | None = None) -> dict[str, Any]:
    try:
        deleted = await stage.cache.purge(route=route, namespace=namespace, key=key)
    except Exception as e:  # store down: say so, do not pretend it worked
        raise APIError(503, f"The cache store is unavailable: {e}",
                       code="cache_unavailable") from None
    return {"deleted": deleted, "route": route, "namespace": namespace, "key": key}


@router.get("/cache/stats")
async def stats(stage: EnabledCacheDep, config: ConfigDep) -> dict[str, Any]:
    cache = stage.cache
    try:
        entries: dict[str, int] | None = await cache.entry_counts()
    except Exception:
        entries = None  # store down: counters still answer
    names = [route.name for route in config.routes]
    for name in names:
        cache.stats.get(name)  # every route appears, counted or not
    counters = cache.stats.snapshot()
    routes = {name: {"entries": entries.get(name, 0) if entries is not None else None,
                     **counters[name]} for name in names}
    return {
        "store": "redis" if cache.backend.shared else "memory",
        "store_available": getattr(cache.backend, "available", True),
        "entries": sum(entries.values()) if entries is not None else None,
        "semantic_index": {"entries": len(cache.semantic.index),
                           "partitions": cache.semantic.index.partitions()},
        "totals": cache.stats.totals(),
        "routes": routes,
    }
