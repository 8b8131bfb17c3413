"""Upstream adapters by `kind`: `engine` (in-process), `openai` (any compatible URL, or a
fleet of them: `endpoints:`), `litellm` (any litellm provider string)."""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.upstreams.base import Upstream


def build_upstream(config: UpstreamConfig, engine: Any = None,
                   engine_metrics: Any = None) -> Upstream:
    """`engine_metrics`: the in-process engine's `EngineMetrics`, which then observes the
    latencies of the requests this upstream sends it."""
    if config.kind == "engine":
        from gateway.upstreams.engine import EngineUpstream

        if engine is None:
            raise RuntimeError(f"upstream {config.name!r} needs the in-process engine")
        return EngineUpstream(config, engine, engine_metrics)
    if config.kind == "openai" and config.endpoints:
        from gateway.upstreams.fleet import FleetUpstream

        return FleetUpstream(config)
    if config.kind == "openai":
        from gateway.upstreams.openai_compat import OpenAICompatUpstream

        return OpenAICompatUpstream(config)
    from gateway.upstreams.litellm import LiteLLMUpstream

    return LiteLLMUpstream(config)


def build_upstreams(config: GatewayConfig, engine: Any = None,
                    engine_metrics: Any = None) -> dict[str, Upstream]:
    """Every configured upstream by name."""
    return {name: build_upstream(up, engine, engine_metrics)
            for name, up in config.upstreams.items()}


__all__ = ["Upstream", "build_upstream", "build_upstreams"]
