"""The one error type of the OpenAI wire layer and its body: `{"error": {message, type,
param, code}}` with the right status, whoever raises it (a parser, an upstream, a stage,
the engine's server), and pydantic's validation errors turned into the same shape.

`param` names the field as OpenAI does, with list indices in brackets:
`messages[0].role`, `prompt[1]`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class APIError(Exception):
    """An error that becomes an OpenAI-style body with `status`; raise it anywhere."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers  # sent with the error (429: Retry-After, x-ratelimit-*)

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(
            message=self.message,
            type=ERROR_TYPES.get(self.status, "invalid_request_error"),
            param=self.param,
            code=self.code,
        )
        return ErrorResponse(error=detail).model_dump()


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


def validation_error(errors: list[Any]) -> APIError:
    """The first validation problem as a 400 naming its field."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    param = error_param(first.get("loc", ()))
    if first.get("type") == "missing":
        return APIError(400, f"Missing required parameter: '{param}'.", param=param,
                        code="missing_required_parameter")
    where = f" for '{param}'" if param else ""
    return APIError(400, f"Invalid value{where}: {first.get('msg', 'invalid')}.", param=param,
                    code="invalid_value")


def from_pydantic(e: ValidationError) -> APIError:
    return validation_error(e.errors(include_url=False, include_input=False))
