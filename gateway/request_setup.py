"""One request setup for every way a generation request arrives (HTTP, WebSocket): the body
parsed by the wire layer (`openai_api.parse_model`), the route resolved, the per-request
controls collected from headers or the body into a `RequestContext`, and the caller's rate
limits charged. The HTTP endpoints and the WebSocket both call `admit`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import Scope

from gateway.auth import Caller
from gateway.config import RouteConfig
from gateway.context import CacheControl, RequestContext
from gateway.kv_isolation import cache_salt_for
from gateway.rate_limit import RateLimiter, Settlement
from gateway.routing import RouteTable
from openai_api import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    Endpoint,
    Kind,
    parse_model,
)


async def admit(raw: bytes, endpoint: Endpoint, conn: HTTPConnection, *, routes: RouteTable,
                rate_limits: RateLimiter, route_name: str | None, caller: Caller | None,
                keyed: bool, headers: Mapping[str, str] | None = None,
                session_id: str | None = None) -> tuple[RequestContext, Settlement | None]:
    """The request `raw` on `endpoint`, set up to run; its rate-limit settlement (None
    when no limit applies). Raises `APIError` for a bad body, an unknown model or route,
    a bad control, a spent limit."""
    body = parse_model(raw, endpoint.request)
    return await admit_request(body, endpoint.kind, conn, routes=routes,
                               rate_limits=rate_limits, route_name=route_name, caller=caller,
                               keyed=keyed, headers=headers, session_id=session_id,
                               client_json=raw)


async def admit_request(body: ChatCompletionRequest | CompletionRequest, kind: Kind,
                        conn: HTTPConnection, *, routes: RouteTable, rate_limits: RateLimiter,
                        route_name: str | None, caller: Caller | None, keyed: bool,
                        headers: Mapping[str, str] | None = None, session_id: str | None = None,
                        client_json: bytes | None = None,
                        ) -> tuple[RequestContext, Settlement | None]:
    """`admit` for a request already parsed, or made by the gateway from another (a
    Responses API request's chat request: `client_json` None)."""
    route = routes.resolve(body.model, route_name)
    tenant = None if caller is None else caller.tenant
    ctx = build_context(conn, kind, body, route, tenant, session_id=session_id,
                        headers=headers, keyed=keyed)
    ctx.client_json = client_json
    return ctx, await rate_limits.check(ctx, caller)


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers as a plain dict (the last of repeated ones): one pass instead
    of a scan of the header list (and a KeyError when absent) on every lookup."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


def request_id_for(conn: HTTPConnection) -> str:
    """This request's id: the one `RequestIdMiddleware` chose, else the caller's sensible
    `x-request-id`, else a fresh one."""
    state = conn.scope.get("state")
    if state and state.get("request_id"):
        return state["request_id"]
    return pick_request_id(conn.headers.get("x-request-id"))


_ID_PREFIX = os.urandom(6).hex()  # per process: ids stay unique across workers and restarts
_ID_COUNTER = itertools.count(int.from_bytes(os.urandom(3), "big"))


def pick_request_id(given: str | None) -> str:
    """The caller's id when sensible, else a new `req-` + 24 hex digits (a random
    per-process prefix and a counter: no system call per request, unlike uuid4)."""
    if given and len(given) <= 128 and given.isprintable():
        return given
    return f"req-{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFFFFFF:012x}"


def build_context(
    conn: HTTPConnection,
    kind: Kind,
    body: ChatCompletionRequest | CompletionRequest,
    route: RouteConfig,
    tenant: str | None,
    *,
    session_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    keyed: bool = False,
) -> RequestContext:
    """Collect the per-request controls (headers or body fields) for a request `route`
    serves (`RouteTable.resolve`). `headers`: the connection's headers already read into a
    dict (`header_map`). `keyed`: the gateway has API keys (`kv_isolation`'s default)."""
    if headers is None:
        headers = conn.headers
    cache_opts: dict[str, Any] = body.cache or {}
    namespace = None
    if route.cache.namespace_header:
        namespace = headers.get("x-cache-namespace") or cache_opts.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise APIError(400, "cache.namespace must be a string", param="cache.namespace")
    try:
        cache_control = CacheControl.parse(headers.get("cache-control"), cache_opts)
    except (TypeError, ValueError):
        raise APIError(400, "cache.max_age must be a number", param="cache.max_age") from None
    return RequestContext(
        request_id=request_id_for(conn),
        kind=kind,
        body=body,
        route=route,
        tenant=tenant,
        namespace=namespace,
        session_id=session_id or headers.get("x-session-id") or body.session_id,
        cache_control=cache_control,
        cache_salt=cache_salt_for(route, tenant, body.cache_salt, keyed),
        priority=route.priority if route.priority is not None else body.priority,
    )
