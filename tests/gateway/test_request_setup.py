"""gateway/request_setup.py: the per-request controls (namespace, session, Cache-Control)
from headers or the body; and the routers' typed dependencies, overridable by tests."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.deps import get_routes
from gateway.request_setup import build_context, header_map, pick_request_id
from gateway.routing import RouteTable
from openai_api import APIError, ChatCompletionRequest
from tests.gateway.conftest import GatewayThread
from tests.support.asgi import posted

CONFIG = GatewayConfig.from_dict({
    "upstreams": {"u": {"kind": "openai", "base_url": "http://x/v1"}},
    "routes": [
        {"name": "r", "models": ["m"], "upstream": "u"},
        {"name": "closed", "models": ["c"], "upstream": "u",
         "cache": {"namespace_header": False}},
    ],
})
APP = create_app(CONFIG)
ROUTES = RouteTable(CONFIG)


def request(headers: dict[str, str] | None = None, body: bytes = b"") -> Request:
    return posted(headers, body, APP)


def body(**extra) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})


def test_controls_from_headers():
    ctx = build_context(request({"x-cache-namespace": "ns", "x-session-id": "s1",
                                 "cache-control": "no-cache, max-age=30",
                                 "x-request-id": "abc"}),
                        "chat", body(), ROUTES.resolve("m"), "team-a")
    assert (ctx.namespace, ctx.session_id, ctx.tenant, ctx.request_id) == ("ns", "s1",
                                                                           "team-a", "abc")
    assert ctx.cache_control.no_cache and ctx.cache_control.max_age_s == 30
    assert ctx.route.name == "r"


def test_controls_from_body_and_socket_session():
    ctx = build_context(request(), "chat",
                        body(session_id="s2", cache={"namespace": "n2", "no_store": True}),
                        ROUTES.resolve("m"), None)
    assert ctx.namespace == "n2" and ctx.session_id == "s2" and ctx.cache_control.no_store
    assert ctx.request_id.startswith("req-")
    ctx = build_context(request({"x-session-id": "h"}), "chat", body(session_id="b"),
                        ROUTES.resolve("m"), None, session_id="socket")
    assert ctx.session_id == "socket"


def test_namespace_ignored_when_route_says_so_and_bad_values():
    ctx = build_context(request({"x-cache-namespace": "ns"}), "chat", body(model="c"),
                        ROUTES.resolve("c"), None)
    assert ctx.namespace is None
    with pytest.raises(APIError) as info:
        build_context(request(), "chat", body(cache={"namespace": 3}), ROUTES.resolve("m"), None)
    assert info.value.param == "cache.namespace"
    with pytest.raises(APIError) as info:
        build_context(request(), "chat", body(cache={"max_age": "soon"}), ROUTES.resolve("m"),
                      None)
    assert info.value.param == "cache.max_age"


def test_header_map_and_build_context_from_it():
    scope = {"headers": [(b"x-session-id", b"s9"), (b"cache-control", b"no-store")]}
    headers = header_map(scope)
    assert headers == {"x-session-id": "s9", "cache-control": "no-store"}
    ctx = build_context(request(), "chat", body(), ROUTES.resolve("m"), None, headers=headers)
    assert (ctx.session_id, ctx.cache_control.no_store) == ("s9", True)


def test_new_request_ids_are_distinct_and_well_formed():
    ids = {pick_request_id(None) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("req-") and len(i) == 28 and int(i[4:], 16) >= 0 for i in ids)
    assert pick_request_id("mine-1") == "mine-1"
    assert pick_request_id("x" * 200).startswith("req-")


def test_a_router_dependency_can_be_overridden():
    # /v1/models takes `RoutesDep`: a test swaps in another route table without the app's
    # own state (the lifespan still builds that as usual)
    other = RouteTable(GatewayConfig.from_dict({
        "upstreams": {"u": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "routes": [{"name": "o", "models": ["other-a", "other-b"], "upstream": "u"}],
    }))
    gateway = GatewayThread(CONFIG)
    gateway.app.dependency_overrides[get_routes] = lambda: other
    gateway.start()
    try:
        listed = httpx.get(gateway.base_url + "/v1/models").json()
        assert [card["id"] for card in listed["data"]] == ["other-a", "other-b"]
        assert httpx.get(gateway.base_url + "/v1/models/m").status_code == 404
        del gateway.app.dependency_overrides[get_routes]
        assert [c["id"] for c in httpx.get(gateway.base_url + "/v1/models").json()["data"]] \
            == ["m", "c"]
    finally:
        gateway.stop()
