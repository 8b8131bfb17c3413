"""Upstream adapters by `kind`: `engine` (in-process), `openai` (any compatible URL, or a
fleet of them: `endpoints:`, split in prefill and decode pools with `prefill_endpoints:`),
`litellm` (any litellm provider string)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall

if TYPE_CHECKING:
    from engine import OpenAIEngine


def build_upstream(config: UpstreamConfig, engine: OpenAIEngine | None = None) -> Upstream:
    """`engine`: the in-process engine, for a `kind: engine` upstream."""
    if config.kind == "engine":
        from gateway.upstreams.engine import EngineUpstream

        if engine is None:
            raise RuntimeError(f"upstream {config.name!r} needs the in-process engine")
        return EngineUpstream(config, engine)
    if config.kind == "openai" and config.prefill_endpoints:
        from gateway.upstreams.disaggregated import DisaggregatedUpstream

        return DisaggregatedUpstream(config)
    if config.kind == "openai" and config.endpoints:
        from gateway.upstreams.fleet import FleetUpstream

        return FleetUpstream(config)
    if config.kind == "openai":
        from gateway.upstreams.openai_compat import OpenAICompatUpstream

        return OpenAICompatUpstream(config)
    from gateway.upstreams.litellm import LiteLLMUpstream

    return LiteLLMUpstream(config)


def build_upstreams(config: GatewayConfig,
                    engine: OpenAIEngine | None = None) -> dict[str, Upstream]:
    """Every configured upstream by name."""
    return {name: build_upstream(up, engine)
            for name, up in config.upstreams.items()}


__all__ = ["Upstream", "UpstreamCall", "build_upstream", "build_upstreams"]
