"""The compared targets: gateway configs the gateway accepts, and clear skip reasons."""

from pathlib import Path

import pytest

from bench.harness.targets import gateway_config, gguf_path, unavailable_reason


@pytest.mark.parametrize("features", [True, False])
def test_gateway_configs_validate(features):
    config_mod = pytest.importorskip("gateway.config")
    config = config_mod.GatewayConfig.from_dict(gateway_config(features))
    route = config.routes[0]
    assert route.cache.exact.enabled is features
    assert route.cache.semantic.enabled is features
    assert route.compress.enabled is features
    assert config.upstreams["local"].kind == "engine"


def test_the_bundled_gguf_is_found():
    assert Path(gguf_path()).suffix == ".gguf"


def test_unknown_target_has_a_reason():
    assert "unknown target" in unavailable_reason("vllm")
    assert unavailable_reason("headstart") is None
