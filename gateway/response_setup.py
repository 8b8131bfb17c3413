"""A Responses API request (`POST /v1/responses`) set up to run as the chat request it
translates to (`openai_api/responses_to_chat.py`), through the same request setup as chat
(`admit_request`: route, controls, rate limits), so routes, caches, transforms, fallback and
headers apply to it exactly as to chat.

A request that continues a chain (`previous_response_id`) starts from the stored
conversation of the response it names (the caller's tenant's only: another tenant's id is
a 404, like an unknown one). The chain is one engine session: its first response's id is
the session, unless the client sends its own (`x-session-id`, `session_id`), so each turn
finds the turns before it in the engine's prefix cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from gateway.auth import Caller
from gateway.context import RequestContext
from gateway.rate_limit import RateLimiter, Settlement
from gateway.request_setup import admit_request
from gateway.response_store import ResponseStore
from gateway.routing import RouteTable
from openai_api import APIError, now, parse_model
from openai_api.responses import ResponsesRequest, new_response_id
from openai_api.responses_items import Item, with_ids
from openai_api.responses_objects import ResponseObject
from openai_api.responses_to_chat import chat_request


@dataclass
class ResponseTurn:
    """One Responses request on its way: the chat request's context, the response it
    becomes, and what a stored record of it keeps."""

    request: ResponsesRequest
    ctx: RequestContext  # the chat request's
    response: ResponseObject  # its id and echoed settings; no output yet
    input_items: list[Item]  # the chain's items, then this request's input, each with an id
    session: str  # the chain's first response id


async def admit_response(raw: bytes, conn: HTTPConnection, store: ResponseStore, *,
                         routes: RouteTable, rate_limits: RateLimiter, route_name: str | None,
                         caller: Caller | None, keyed: bool,
                         headers: Mapping[str, str] | None = None,
                         ) -> tuple[ResponseTurn, Settlement | None]:
    """The request `raw` set up to run; its rate-limit settlement. Raises `APIError` for a
    bad body or item (400 naming its place), an unknown `previous_response_id` (404), and
    whatever the chat setup refuses."""
    request = parse_model(raw, ResponsesRequest)
    items = with_ids(request.input_items())
    tenant = None if caller is None else caller.tenant
    response_id = new_response_id()
    history: list[Item] = []
    session = response_id
    if request.previous_response_id is not None:
        previous = await store.get(tenant, request.previous_response_id)
        if previous is None:
            raise APIError(404, f"Previous response with id '{request.previous_response_id}' "
                           "not found.", param="previous_response_id",
                           code="previous_response_not_found")
        history, session = previous.conversation(), previous.session
    chat = chat_request(request, history + items)
    headers = conn.headers if headers is None else headers
    session_id = headers.get("x-session-id") or request.session_id or session
    ctx, settlement = await admit_request(chat, "chat", conn, routes=routes,
                                          rate_limits=rate_limits, route_name=route_name,
                                          caller=caller, keyed=keyed, headers=headers,
                                          session_id=session_id)
    response = ResponseObject.started(request, response_id, now())
    return ResponseTurn(request, ctx, response, history + items, session), settlement
