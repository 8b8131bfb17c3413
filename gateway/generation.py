"""The generation endpoints as plain ASGI: `POST /v1/chat/completions`, `/v1/completions`,
`/v1/responses` (answered as the chat request it translates to) and their
`/r/{route}/v1/...` forms.

These carry nearly all the traffic, so they skip FastAPI's routing, dependency injection
and middleware stack (seven layers, each awaited per request) and run in front of it
(`GatewayApp.__call__` in `gateway/app.py`); under `headstart serve` they also skip uvicorn's
per-request cycle (`gateway/http_protocol.py`). They keep every behaviour of the rest of the
API: auth before anything else, OpenAI-style error bodies with the right status,
`x-request-id` on every response, a disconnected client aborting the upstream request.
They are handed the parts they use (`GenerationDeps`), not the app.
"""

from __future__ import annotations

import asyncio
import json
import logging

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from gateway.auth import Authenticator
from gateway.coalesced_send import CoalescedSend
from gateway.cors import CorsPolicy
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.request_setup import admit, header_map, pick_request_id
from gateway.response_answer import write_response
from gateway.response_setup import admit_response
from gateway.response_store import ResponseStore
from gateway.responses import ClientWatch, send_json, write_answer
from gateway.routing import RouteTable
from openai_api import ENDPOINTS, APIError, receive_body

log = logging.getLogger("headstart.gateway")

class GenerationDeps:
    """What the generation endpoints use of the gateway: made by `create_app`, the
    pipeline added by its lifespan once the upstreams are open."""

    __slots__ = ("auth", "routes", "max_body_bytes", "cors", "pipeline", "rate_limits",
                 "responses")
    pipeline: Pipeline
    rate_limits: RateLimiter  # set by `create_app`
    responses: ResponseStore  # set by `create_app`: stored Responses API answers

    def __init__(self, auth: Authenticator, routes: RouteTable, max_body_bytes: int,
                 cors: CorsPolicy | None) -> None:
        self.auth = auth
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self.cors = cors  # None: no cross-origin requests


def match(path: str) -> tuple[str, str | None] | None:
    """(endpoint, route name or None) when `path` is a generation endpoint, else None."""
    if path.startswith("/v1/"):
        rest, route = path[4:], None
    elif path.startswith("/r/"):
        route, sep, rest = path[3:].partition("/v1/")
        if not sep or not route or "/" in route:
            return None
    else:
        return None
    rest = rest.rstrip("/")
    return (rest, route) if rest in ENDPOINTS else None


async def serve_generation(deps: GenerationDeps, scope: Scope, receive: Receive, send: Send,
                           endpoint: str, route_name: str | None) -> None:
    """Answer one request on a generation endpoint; never raises for the request's own
    failures (they become error responses), only for the server's shutdown."""
    request = Request(scope, receive)
    headers = header_map(scope)
    request_id = pick_request_id(headers.get("x-request-id"))
    scope.setdefault("state", {})["request_id"] = request_id
    if deps.cors is not None:
        send = deps.cors.wrap(send, headers.get("origin"))
    out = CoalescedSend(send)
    watch: ClientWatch | None = None
    settlement = None
    try:
        if scope["method"] != "POST":
            raise APIError(405, f"Method {scope['method']} is not allowed on {scope['path']}")
        caller = deps.auth.caller_for(request)
        raw = await receive_body(receive, headers.get("content-length"), deps.max_body_bytes)
        found = ENDPOINTS[endpoint]
        setup = {"routes": deps.routes, "rate_limits": deps.rate_limits,
                 "route_name": route_name, "caller": caller, "keyed": not deps.auth.open,
                 "headers": headers}
        if found.kind == "responses":  # answered as the chat request it translates to
            turn, settlement = await admit_response(raw, request, deps.responses, **setup)
            ctx = turn.ctx
            watch = ClientWatch(receive)
            await write_response(turn, deps.pipeline, deps.responses, out)
        else:
            ctx, settlement = await admit(raw, found, request, **setup)
            watch = ClientWatch(receive)
            await write_answer(ctx, deps.pipeline, out)
    except asyncio.CancelledError:
        if watch is None or not watch.gone:
            raise  # the server is shutting down
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    except ClientDisconnect:
        return
    except APIError as e:
        if not out.started:
            await _send_error(out, e, request_id)
    except Exception as e:  # noqa: BLE001 - any failure still answers OpenAI-style
        log.exception("unhandled error on %s %s", scope["method"], scope["path"])
        if not out.started:
            await _send_error(out, APIError(500, f"Internal error: {type(e).__name__}"),
                              request_id)
    finally:
        if watch is not None:
            watch.stop()
        if settlement is not None:
            deps.rate_limits.settle_later(settlement, ctx)


async def _send_error(send: CoalescedSend, err: APIError, request_id: str) -> None:
    headers = [(b"x-request-id", request_id.encode())]
    if err.status == 405:
        headers.append((b"allow", b"POST"))
    if err.headers:
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
    await send_json(send, err.status, json.dumps(err.body()).encode(), headers)
