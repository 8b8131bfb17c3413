"""Turning an HTTP request into a validated body and a `RequestContext`.

The body is read by hand rather than by FastAPI so that every bad input gets its own clear
OpenAI-style error before anything reaches a cache or an upstream: too large (413, checked on
`Content-Length` and on the bytes actually received), not UTF-8, not JSON, wrong fields (400).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import HTTPConnection, Request

from engine.protocol import APIError, ChatCompletionRequest, CompletionRequest
from gateway.context import CacheControl, RequestContext
from gateway.errors import from_pydantic

M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than `limit` bytes whatever Content-Length claims."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise _too_large(limit)
        except ValueError:
            raise APIError(400, "Invalid Content-Length header") from None
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
    return b"".join(parts)


def _too_large(limit: int) -> APIError:
    return APIError(413, f"Request body too large: the limit is {limit} bytes",
                    code="request_too_large")


def parse_model(raw: bytes, model: type[M]) -> M:
    """Validate a JSON body into `model`; 400 for non-UTF-8, malformed JSON or bad fields."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(400, f"The request body is not valid UTF-8 (byte {e.start})",
                       code="invalid_encoding") from None
    if not text.strip():
        raise APIError(400, "The request body is empty; send a JSON object", code="invalid_json")
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        if errors and errors[0]["type"] == "json_invalid":
            raise APIError(400, "We could not parse the JSON body of your request: "
                           f"{errors[0]['msg']}", code="invalid_json") from None
        if errors and errors[0]["type"] == "model_type":
            raise APIError(400, "The request body must be a JSON object",
                           code="invalid_json") from None
        raise from_pydantic(e) from None


async def parse_body(request: Request, model: type[M]) -> M:
    limit = request.app.state.config.limits.max_body_bytes
    return parse_model(await read_body(request, limit), model)


def request_id_for(conn: HTTPConnection) -> str:
    """This request's id: the one `RequestIdMiddleware` chose, else the caller's sensible
    `x-request-id`, else a fresh one."""
    state = conn.scope.get("state")
    if state and state.get("request_id"):
        return state["request_id"]
    return pick_request_id(conn.headers.get("x-request-id"))


def pick_request_id(given: str | None) -> str:
    if given and len(given) <= 128 and given.isprintable():
        return given
    return f"req-{uuid.uuid4().hex[:24]}"


def build_context(
    conn: HTTPConnection,
    kind: Literal["chat", "completion"],
    body: ChatCompletionRequest | CompletionRequest,
    route_name: str | None,
    tenant: str | None,
    *,
    session_id: str | None = None,
) -> RequestContext:
    """Resolve the route and collect the per-request controls (headers or body fields)."""
    route = conn.app.state.routes.resolve(body.model, route_name)
    cache_opts: dict[str, Any] = body.cache or {}
    namespace = None
    if route.cache.namespace_header:
        namespace = conn.headers.get("x-cache-namespace") or cache_opts.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise APIError(400, "cache.namespace must be a string", param="cache.namespace")
    try:
        cache_control = CacheControl.parse(conn.headers.get("cache-control"), cache_opts)
    except (TypeError, ValueError):
        raise APIError(400, "cache.max_age must be a number", param="cache.max_age") from None
    return RequestContext(
        request_id=request_id_for(conn),
        kind=kind,
        body=body,
        route=route,
        tenant=tenant,
        namespace=namespace,
        session_id=session_id or conn.headers.get("x-session-id") or body.session_id,
        cache_control=cache_control,
    )
