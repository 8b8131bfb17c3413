"""gateway/response_setup.py: a Responses API request set up as its chat request: the chain
it continues read from the store (its own tenant's only), and the chain's first response
as the engine session unless the client names its own."""

from __future__ import annotations

import json

import pytest

from gateway.app import create_app
from gateway.auth import Caller
from gateway.config import GatewayConfig, RateLimits
from gateway.response_setup import ResponseTurn, admit_response
from gateway.response_store import MemoryResponseStore, StoredResponse
from openai_api import APIError, ChatMessage
from openai_api.responses import ResponsesRequest
from openai_api.responses_items import MessageItem, OutputText, with_ids
from openai_api.responses_objects import ResponseObject
from tests.support.asgi import posted

CONFIG = GatewayConfig.from_dict({
    "upstreams": {"u": {"kind": "openai", "base_url": "http://x/v1"}},
    "routes": [{"name": "r", "models": ["m"], "upstream": "u"}],
})
APP = create_app(CONFIG)
TEAM_A = Caller("a" * 64, "team-a", RateLimits(), RateLimits())


async def admit(store: MemoryResponseStore, headers: dict[str, str] | None = None,
                caller: Caller | None = None, **fields) -> ResponseTurn:
    raw = json.dumps({"model": "m", "input": "And Rome?", **fields}).encode()
    turn, _ = await admit_response(raw, posted(headers, raw, APP), store,
                                   routes=APP.state.routes, rate_limits=APP.state.rate_limits,
                                   route_name=None, caller=caller, keyed=caller is not None)
    return turn


async def stored_chain(store: MemoryResponseStore, tenant: str | None) -> None:
    """resp_2, the second turn of a chain that resp_root began."""
    request = ResponsesRequest.model_validate({"model": "m", "input": "Weather in Paris?"})
    response = ResponseObject.started(request, "resp_2", created_at=7)
    response.output = [MessageItem(id="msg_out", role="assistant", status="completed",
                                   content=[OutputText(text="Sunny.")])]
    items = with_ids([MessageItem(role="user", content="Weather in Paris?")])
    await store.put(tenant, StoredResponse(response=response, input_items=items,
                                           session="resp_root"))


async def test_a_first_turn_is_a_chat_request_whose_session_is_its_own_id():
    turn = await admit(MemoryResponseStore(60, 10), instructions="Be brief.")
    ctx = turn.ctx
    assert (ctx.kind, ctx.client_json, ctx.route.name) == ("chat", None, "r")
    assert ctx.body.messages == [ChatMessage(role="system", content="Be brief."),
                                 ChatMessage(role="user", content="And Rome?")]
    assert ctx.session_id == turn.response.id == turn.session
    assert [item.id.startswith("msg_") for item in turn.input_items] == [True]


async def test_a_chained_turn_continues_the_stored_conversation_in_its_chains_session():
    store = MemoryResponseStore(60, 10)
    await stored_chain(store, None)
    turn = await admit(store, previous_response_id="resp_2")
    assert [(m.role, m.content) for m in turn.ctx.body.messages] == [
        ("user", "Weather in Paris?"), ("assistant", "Sunny."), ("user", "And Rome?")]
    assert turn.ctx.session_id == turn.session == "resp_root"
    assert len(turn.input_items) == 3 and turn.response.previous_response_id == "resp_2"


async def test_the_clients_own_session_id_wins():
    store = MemoryResponseStore(60, 10)
    await stored_chain(store, None)
    turn = await admit(store, {"x-session-id": "mine"}, previous_response_id="resp_2")
    assert (turn.ctx.session_id, turn.session) == ("mine", "resp_root")


async def test_an_unknown_previous_response_is_a_404_naming_it():
    with pytest.raises(APIError) as info:
        await admit(MemoryResponseStore(60, 10), previous_response_id="resp_nope")
    assert (info.value.status, info.value.param) == (404, "previous_response_id")


async def test_another_tenants_response_is_not_found():
    store = MemoryResponseStore(60, 10)
    await stored_chain(store, "team-b")
    with pytest.raises(APIError) as info:
        await admit(store, caller=TEAM_A, previous_response_id="resp_2")
    assert info.value.status == 404
