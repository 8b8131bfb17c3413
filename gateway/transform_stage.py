"""Pipeline stage: prompt transforms (placeholder until prompts/ lands).

The prompts helper replaces this file; the signatures stay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from gateway.context import RequestContext

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

Forward = Callable[[Any], AsyncIterator[Any]]


class TransformStage:
    def __init__(self, config: GatewayConfig, engine: Any = None) -> None:
        self.config = config
        self.engine = engine

    def run(self, ctx: RequestContext, forward: Forward) -> AsyncIterator[Any]:
        """Chunks for the whole request; `forward(request)` sends one request upstream."""
        return forward(ctx.body)
