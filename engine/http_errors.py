"""Request bodies in, OpenAI-style error bodies out, for the engine's FastAPI server.

Bodies are parsed here rather than by FastAPI so that every malformed request (not UTF-8,
not JSON, not an object, a missing or invalid field) becomes a 400 with the OpenAI shape
`{"error": {"message", "type", "param", "code"}}` naming the offending field. Nothing
a client sends may produce a 500.
"""

from __future__ import annotations

import json
import logging
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.protocol import APIError

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left; nobody reads the body


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


def error_param(loc: tuple | list) -> str | None:
    """A pydantic error location as an OpenAI `param`: ("body", "messages", 0, "role") ->
    "messages[0].role"."""
    param = ""
    for part in loc:
        if part == "body" and not param:
            continue
        if isinstance(part, int):
            param += f"[{part}]"
        else:
            param += f".{part}" if param else str(part)
    return param or None


def validation_error(errors: list[dict]) -> APIError:
    """The first validation problem as a 400 naming its field."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    param = error_param(first.get("loc", ()))
    if first.get("type") == "missing":
        return APIError(400, f"Missing required parameter: '{param}'.", param=param,
                        code="missing_required_parameter")
    where = f" for '{param}'" if param else ""
    return APIError(400, f"Invalid value{where}: {first.get('msg', 'invalid')}.", param=param,
                    code="invalid_value")


async def parse_body(request: Request, model: type[M]) -> M:
    """The request body as `model`, or an APIError(400) saying exactly what is wrong."""
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, "The request body is not valid UTF-8.", code="invalid_encoding") from exc
    if not text.strip():
        raise APIError(400, "The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data = json.loads(text)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # lone surrogates like "\ud800"
    except json.JSONDecodeError as exc:
        raise APIError(400, f"The request body is not valid JSON: {exc}.",
                       code="invalid_json") from exc
    except UnicodeEncodeError as exc:
        raise APIError(400, "The request body holds an invalid unicode escape.",
                       code="invalid_encoding") from exc
    if not isinstance(data, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from exc


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the app as an OpenAI-style body with the right status."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_error(list(exc.errors()))
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = APIError(exc.status_code, str(exc.detail))
        return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(ClientDisconnected)
    async def client_gone(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        err = APIError(500, f"internal error: {type(exc).__name__}", code="internal_error")
        return JSONResponse(err.body(), status_code=500)
