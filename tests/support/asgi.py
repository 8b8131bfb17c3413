"""A Starlette request made by hand: the body once, then a disconnect."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request


def posted(headers: dict[str, str] | None = None, body: bytes = b"", app: Any = None) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw, "query_string": b""}
    if app is not None:
        scope["app"] = app
    return Request(scope, receive)
