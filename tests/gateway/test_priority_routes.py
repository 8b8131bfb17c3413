"""Request priorities on the gateway: a route's `priority:` sets the field its requests carry
upstream, an engine upstream must schedule by priority for it, and admission control lets a
batch class wait and judges an interactive request by its own class only."""

from __future__ import annotations

import json

import pytest

from gateway.admission import Admission
from gateway.config import ConfigError, GatewayConfig
from gateway.context import RequestContext
from gateway.upstreams.call import UpstreamCall
from gateway.upstreams.openai_compat import OpenAICompatUpstream
from openai_api import APIError, ChatCompletionRequest


def config(engine: dict | None = None, route_priority: int | None = 10,
           **limits: float) -> dict:
    return {"limits": limits,
            "upstreams": {"local": {"kind": "engine", "engine": engine or {}},
                          "remote": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"}},
            "routes": [{"name": "batch", "models": ["batch"], "upstream": "local",
                        "priority": route_priority},
                       {"name": "chat", "models": ["chat"], "upstream": "local"},
                       {"name": "remote", "models": ["remote"], "upstream": "remote"}]}


def ctx(cfg: GatewayConfig, route: str, priority: int | None = None) -> RequestContext:
    body = ChatCompletionRequest.model_validate(
        {"model": route, "messages": [{"role": "user", "content": "hi"}]})
    return RequestContext(request_id="r1", kind="chat", body=body, route=cfg.route(route),
                          priority=priority)


def test_a_route_priority_needs_an_engine_that_schedules_by_priority():
    with pytest.raises(ConfigError, match=r"routes\.0\.priority: 10 needs the engine upstream "
                       r"'local' to set engine: \{scheduling_policy: priority\}"):
        GatewayConfig.from_dict(config())
    GatewayConfig.from_dict(config({"scheduling_policy": "priority"}))
    GatewayConfig.from_dict(config(route_priority=0))  # the default class needs nothing


def test_the_gateway_limit_sheds_default_classes_and_lets_batch_wait():
    cfg = GatewayConfig.from_dict(config({"scheduling_policy": "priority"}, max_queue_s=2.0))
    admission = Admission(cfg, None, lambda route, reason: None)
    assert admission.limit_s(ctx(cfg, "chat")) == 2.0
    assert admission.limit_s(ctx(cfg, "chat", priority=-1)) == 2.0
    assert admission.limit_s(ctx(cfg, "batch", priority=10)) is None
    cfg.route("batch").max_queue_s = 30.0  # a route's own limit holds for every class
    assert admission.limit_s(ctx(cfg, "batch", priority=10)) == 30.0


def test_an_interactive_request_is_not_judged_by_batch_work_in_flight():
    cfg = GatewayConfig.from_dict(config({"scheduling_policy": "priority"}, max_queue_s=1.0))
    shed: list[str] = []
    admission = Admission(cfg, None, lambda route, reason: shed.append(route))
    load = admission.loads["remote"]
    for ahead, seconds in [(0, 0.1), (10, 1.1)] * 5:  # 0.1 s a request ahead
        load.fit.add(ahead, seconds)
    load.by_priority.update({10: 30})  # batch work fills the upstream
    assert admission.expected_wait_s("remote", 0) == 0.0
    assert admission.expected_wait_s("remote", 10) == pytest.approx(3.0)
    admission.check(ctx(cfg, "remote", priority=0), "remote")
    load.by_priority.update({0: 20})
    with pytest.raises(APIError) as err:
        admission.check(ctx(cfg, "remote", priority=0), "remote")
    assert err.value.status == 429 and shed == ["remote"]
    load.done(0)
    assert load.by_priority[0] == 19 and load.in_flight == 49


def test_the_route_priority_goes_upstream_in_the_body():
    upstream = OpenAICompatUpstream(cfg := GatewayConfig.from_dict(
        config({"scheduling_policy": "priority"})).upstreams["remote"])
    assert cfg.name == "remote"
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "priority": 3}).encode()
    request = ChatCompletionRequest.model_validate_json(raw)
    assert upstream._json(request, UpstreamCall("r", client_json=raw, priority=3)) == raw
    sent = json.loads(upstream._json(request, UpstreamCall("r", client_json=raw, priority=10)))
    assert sent["priority"] == 10 and "cache_salt" not in sent
    plain = ChatCompletionRequest.model_validate({"model": "m", "messages": [
        {"role": "user", "content": "hi"}]})
    assert "priority" not in json.loads(upstream._json(plain, UpstreamCall("r")))


def test_priority_is_an_integer_in_the_body():
    for bad in ("high", 1.5, True):
        with pytest.raises(ValueError):
            ChatCompletionRequest.model_validate(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                 "priority": bad})
