"""Turning an HTTP request into a `RequestContext` (its body is read and parsed by the wire
layer, `openai_api.parse`), and the typed dependencies the routers take.

The gateway's parts live on `app.state` (set by `gateway/app.py`); the providers at the end
of this file read them there (and `gateway/auth.py`'s `require_tenant` / `require_admin` the
authenticator). Routers take the typed aliases (`routes: RoutesDep`), so the types are
checked and a test can swap a part with `app.dependency_overrides[get_routes] = ...`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import HTTPConnection
from starlette.types import Scope

from gateway.auth import Authenticator
from gateway.cache_stage import CacheStage
from gateway.config import GatewayConfig, RouteConfig
from gateway.context import CacheControl, RequestContext
from gateway.dashboard.access import check_dashboard_access
from gateway.dashboard.data import DashboardFeed
from gateway.kv_isolation import cache_salt_for
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.routing import RouteTable
from openai_api import APIError, ChatCompletionRequest, CompletionRequest, Kind


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
    )


# ---------------------------------------------------------------- typed dependencies
# One provider per part of the gateway; FastAPI resolves each once per request. The parts
# are created by `create_app` (config, routes, auth, metrics) or by the lifespan before the
# first request (cache, pipeline).


def get_config(conn: HTTPConnection) -> GatewayConfig:
    return conn.app.state.config


def get_routes(conn: HTTPConnection) -> RouteTable:
    return conn.app.state.routes


def get_auth(conn: HTTPConnection) -> Authenticator:
    return conn.app.state.auth


def get_metrics(conn: HTTPConnection) -> GatewayMetrics:
    return conn.app.state.metrics


def get_cache_stage(conn: HTTPConnection) -> CacheStage:
    return conn.app.state.cache


def get_pipeline(conn: HTTPConnection) -> Pipeline:
    return conn.app.state.pipeline


def get_rate_limits(conn: HTTPConnection) -> RateLimiter:
    return conn.app.state.rate_limits


ConfigDep = Annotated[GatewayConfig, Depends(get_config)]
RoutesDep = Annotated[RouteTable, Depends(get_routes)]
AuthDep = Annotated[Authenticator, Depends(get_auth)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
CacheStageDep = Annotated[CacheStage, Depends(get_cache_stage)]
PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
RateLimitsDep = Annotated[RateLimiter, Depends(get_rate_limits)]


def dashboard_access(conn: HTTPConnection, auth: AuthDep) -> None:
    """The admin key, from a header or the dashboard's session cookie (401/403 otherwise)."""
    check_dashboard_access(conn, auth)


def dashboard_feed(conn: HTTPConnection) -> DashboardFeed:
    return conn.app.state.dashboard


DashboardAccess = Annotated[None, Depends(dashboard_access)]
DashboardData = Annotated[DashboardFeed, Depends(dashboard_feed)]
