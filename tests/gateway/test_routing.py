"""Route resolution: model globs in config order (first match wins), `/r/{route}` by name."""

from __future__ import annotations

import pytest

from gateway.config import GatewayConfig
from gateway.routing import RouteTable
from openai_api import APIError


@pytest.fixture
def table() -> RouteTable:
    return RouteTable(GatewayConfig.from_dict({
        "upstreams": {"u": {"kind": "openai", "base_url": "http://x/v1"}},
        "routes": [
            {"name": "support-vip", "models": ["support-vip"], "upstream": "u"},
            {"name": "support", "models": ["support", "support-*"], "upstream": "u"},
            {"name": "globs-only", "models": ["gpt-?o*"], "upstream": "u"},
            {"name": "catch-all", "models": ["*"], "upstream": "u"},
        ],
    }))


def test_first_match_wins(table):
    assert table.resolve("support-vip").name == "support-vip"
    assert table.resolve("support-basic").name == "support"
    assert table.resolve("support").name == "support"
    assert table.resolve("gpt-4o-mini").name == "globs-only"
    assert table.resolve("anything").name == "catch-all"
    assert table.resolve("Support").name == "catch-all"  # globs are case-sensitive


def test_route_prefix_overrides_model(table):
    assert table.resolve("support", "catch-all").name == "catch-all"


def test_unknown_route_and_model_are_404():
    table = RouteTable(GatewayConfig.from_dict({
        "upstreams": {"u": {"kind": "openai", "base_url": "http://x/v1"}},
        "routes": [{"name": "r", "models": ["m-*"], "upstream": "u"}],
    }))
    with pytest.raises(APIError) as info:
        table.resolve("other")
    assert info.value.status == 404 and info.value.param == "model"
    assert info.value.code == "model_not_found"
    with pytest.raises(APIError) as info:
        table.resolve("m-1", "nope")
    assert info.value.status == 404 and "nope" in info.value.message


def test_model_names_lists_literals_or_route_name(table):
    assert table.model_names() == ["support-vip", "support", "globs-only", "catch-all"]
    assert table.model_names("support") == ["support"]
