"""FastAPI's own errors (unknown path, wrong method, validation, anything unexpected) as
OpenAI-style bodies, for every app that speaks the API: the gateway and the engine's server
install the same handlers."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from openai_api.errors import APIError, from_pydantic, validation_error

log = logging.getLogger("headstart.api")

_STATUS_MESSAGES = {
    404: "Not found: {method} {path}",
    405: "Method {method} is not allowed on {path}",
}


def error_response(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status,
                        headers={**(err.headers or {}), **(headers or {})} or None)


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves `app` as an OpenAI-style body with the right status."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

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
        return error_response(APIError(exc.status_code, message), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, f"Internal error: {type(exc).__name__}",
                                       code="internal_error"))
