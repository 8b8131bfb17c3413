"""One way to read a request body into a typed request, for the gateway and the engine's
server alike, so the same bad body gets the same error from both.

The body is read by hand rather than by a framework so that every bad input gets its own
clear OpenAI-style error before anything else sees it: too large (413, checked on
`Content-Length` and on the bytes actually received), not UTF-8, not JSON, not an object,
wrong fields (400 naming the field).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from openai_api.errors import APIError, from_pydantic

M = TypeVar("M", bound=BaseModel)
DEFAULT_BODY_LIMIT = 4 * 1024 * 1024  # bytes; larger bodies get 413


async def receive_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The raw body straight from the ASGI `receive` (`declared`: the Content-Length
    header), refusing more than `limit` bytes whatever Content-Length claims; raises
    `ClientDisconnect` if the client leaves first."""
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


async def read_body(request: Request, limit: int = DEFAULT_BODY_LIMIT) -> bytes:
    """`receive_body` for a Starlette request."""
    return await receive_body(request.receive, request.headers.get("content-length"), limit)


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
    itself upstream."""
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


async def parse_body(request: Request, model: type[M], limit: int = DEFAULT_BODY_LIMIT) -> M:
    """The body read (at most `limit` bytes) and validated into `model`."""
    return parse_model(await read_body(request, limit), model)
