"""Turning an HTTP request into a validated body and a `RequestContext`, and the typed
dependencies the routers take.

The body is read by hand rather than by FastAPI so that every bad input gets its own clear
OpenAI-style error before anything reaches a cache or an upstream: too large (413, checked on
`Content-Length` and on the bytes actually received), not UTF-8, not JSON, wrong fields (400).

The gateway's parts live on `app.state` (set by `gateway/app.py`); the providers at the end
of this file read them there (and `gateway/auth.py`'s `require_tenant` / `require_admin` the
authenticator). Routers take the typed aliases (`routes: RoutesDep`), so the types are
checked and a test can swap a part with `app.dependency_overrides[get_routes] = ...`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.types import Receive, Scope

from engine.protocol import APIError, ChatCompletionRequest, CompletionRequest
from gateway.auth import Authenticator
from gateway.cache_stage import CacheStage
from gateway.config import GatewayConfig, RouteConfig
from gateway.context import CacheControl, RequestContext
from gateway.dashboard.access import check_dashboard_access
from gateway.dashboard.data import DashboardFeed
from gateway.errors import from_pydantic
from gateway.kv_isolation import cache_salt_for
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.routing import RouteTable

M = TypeVar("M", bound=BaseModel)


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers as a plain dict (the last of repeated ones): one pass instead
    of a scan of the header list (and a KeyError when absent) on every lookup."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than `limit` bytes whatever Content-Length claims."""
    return await receive_body(request.receive, request.headers.get("content-length"), limit)


async def receive_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """`read_body` straight from the ASGI `receive` (`declared`: the Content-Length
    header); raises `ClientDisconnect` if the client leaves first."""
    _check_declared(declared, limit)
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _check_declared(declared: str | None, limit: int) -> None:
    if declared is not None:
        try:
            if int(declared) > limit:
                raise _too_large(limit)
        except ValueError:
            raise APIError(400, "Invalid Content-Length header") from None


def _too_large(limit: int) -> APIError:
    return APIError(413, f"Request body too large: the limit is {limit} bytes",
                    code="request_too_large")


def parse_model(raw: bytes, model: type[M]) -> M:
    """Validate a JSON body into `model`; 400 for non-UTF-8, malformed JSON or bad fields.
    Strict JSON types, as OpenAI's API has them (`"max_tokens": "5"` is a 400, not 5): what
    was validated is then exactly what the body says, so a passthrough can send the body
    itself upstream (`OpenAICompatUpstream._json`)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(400, f"The request body is not valid UTF-8 (byte {e.start})",
                       code="invalid_encoding") from None
    if not text.strip():
        raise APIError(400, "The request body is empty; send a JSON object", code="invalid_json")
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        if errors and errors[0]["type"] == "json_invalid":
            raise APIError(400, "We could not parse the JSON body of your request: "
                           f"{errors[0]['msg']}", code="invalid_json") from None
        if errors and errors[0]["type"] == "model_type":
            raise APIError(400, "The request body must be a JSON object",
                           code="invalid_json") from None
        raise from_pydantic(e) from None


async def parse_body(request: Request, model: type[M], limit: int) -> M:
    """The body read (at most `limit` bytes) and validated into `model`."""
    return parse_model(await read_body(request, limit), model)


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
    kind: Literal["chat", "completion"],
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
