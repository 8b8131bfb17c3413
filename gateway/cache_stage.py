"""Pipeline stage: exact + semantic cache lookups and stores (placeholder until cache/ lands).

The cache helper replaces this file; the signatures stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.context import Answer, RequestContext

if TYPE_CHECKING:
    from gateway.config import GatewayConfig


class CacheStage:
    @classmethod
    async def create(cls, config: GatewayConfig) -> CacheStage:
        return cls()

    async def lookup(self, ctx: RequestContext) -> Answer | None:
        return None

    async def store(self, ctx: RequestContext, answer: Answer) -> None:
        return None

    async def close(self) -> None:
        return None
