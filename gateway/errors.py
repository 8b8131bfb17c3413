"""Every error leaves the gateway as an OpenAI-style body: `{"error": {message, type, param,
code}}` with the right status, whether raised by us, by validation, or by routing (404/405)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.protocol import APIError

log = logging.getLogger("headstart.gateway")


def error_response(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def validation_error(errors: list[Any], status: int = 400) -> APIError:
    """The first pydantic error as an APIError whose `param` is the field's dotted path."""
    if not errors:
        return APIError(status, "Invalid request body")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid value")
    if first.get("type") == "missing":
        message = f"Missing required parameter: {param!r}"
    elif param:
        message = f"Invalid value for {param!r}: {msg}"
    else:
        message = f"Invalid request body: {msg}"
    return APIError(status, message, param=param, code=first.get("type"))


def from_pydantic(e: ValidationError) -> APIError:
    return validation_error(e.errors(include_url=False, include_input=False))


_STATUS_MESSAGES = {
    404: "Not found: {method} {path}",
    405: "Method {method} is not allowed on {path}",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        headers = dict(exc.headers or {})
        ctx = getattr(request.state, "ctx", None)
        if ctx is not None:
            headers["x-request-id"] = ctx.request_id
        return error_response(exc, headers or None)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def _pydantic(request: Request, exc: ValidationError) -> JSONResponse:
        return error_response(from_pydantic(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        template = _STATUS_MESSAGES.get(exc.status_code)
        if template:
            message = template.format(method=request.method, path=request.url.path)
        else:
            message = str(exc.detail)
        err = APIError(exc.status_code, message)
        return error_response(err, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, f"Internal error: {type(exc).__name__}"))
