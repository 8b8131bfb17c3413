"""Stored responses (`POST /v1/responses` with `store`, the default): what
`GET /v1/responses/{id}` returns, and what a later request's `previous_response_id`
continues.

A record holds the response as it was answered, the whole conversation it was answered
from (its chain's items, then its own input, each with an id: its `input_items`), and its
chain's session (the first response's id: every turn of a chain is one engine session, so
the engine's prefix cache keeps serving it). A chain is followed with one read. Records
belong to a tenant: another tenant's lookup finds nothing (a 404, as for an id never seen).

In the gateway's memory by default, the oldest dropped past `responses.max_entries`; in
Redis when the config names `redis:`, each record one string key expiring after
`responses.ttl_s`, so every gateway replica sees them. Redis is reached through the
project's pipelined `RespClient` (as the rate limits are); when it cannot answer, a read
is a 503 and a write is logged and skipped (the answer itself is already on its way).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Protocol

from pydantic import BaseModel, Field

from cache.stores.resp_client import RespClient, RespError
from gateway.config import GatewayConfig
from openai_api import APIError
from openai_api.responses_items import Item
from openai_api.responses_objects import ResponseObject

log = logging.getLogger("headstart.gateway")

StoredItem = Annotated[Item, Field(discriminator="type")]


class StoredResponse(BaseModel):
    """One stored response and what it was answered from."""

    response: ResponseObject
    input_items: list[StoredItem]  # the chain's items, then this request's input
    session: str  # the chain's first response id

    def conversation(self) -> list[Item]:
        """What a request continuing this response starts from: its input, then its output."""
        return [*self.input_items, *self.response.output]


class ResponseStore(Protocol):
    async def get(self, tenant: str | None, response_id: str) -> StoredResponse | None: ...

    async def put(self, tenant: str | None, record: StoredResponse) -> None: ...

    async def delete(self, tenant: str | None, response_id: str) -> bool: ...

    def close(self) -> None: ...


class MemoryResponseStore:
    """Records in this process, newest last; expired ones are dropped when read."""

    def __init__(self, ttl_s: float, max_entries: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_entries, self.clock = ttl_s, max_entries, clock
        self._records: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    async def get(self, tenant: str | None, response_id: str) -> StoredResponse | None:
        key = (tenant or "", response_id)
        found = self._records.get(key)
        if found is None:
            return None
        if found[0] <= self.clock():
            del self._records[key]
            return None
        return StoredResponse.model_validate_json(found[1])

    async def put(self, tenant: str | None, record: StoredResponse) -> None:
        key = (tenant or "", record.response.id)
        self._records[key] = (self.clock() + self.ttl_s, record.model_dump_json().encode())
        self._records.move_to_end(key)
        while len(self._records) > self.max_entries:
            self._records.popitem(last=False)

    async def delete(self, tenant: str | None, response_id: str) -> bool:
        return self._records.pop((tenant or "", response_id), None) is not None

    def close(self) -> None:
        self._records.clear()


class RedisResponseStore:
    """Records in Redis: `{prefix}resp:{tenant digest}:{id}`, expiring after `ttl_s`."""

    def __init__(self, url: str, ttl_s: float, *, prefix: str = "hs:",
                 timeout_s: float = 1.0) -> None:
        self.client = RespClient(url, timeout_s)  # a long conversation is a large value
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.prefix = prefix

    def _key(self, tenant: str | None, response_id: str) -> str:
        owner = hashlib.sha256((tenant or "").encode()).hexdigest()[:16] if tenant else "-"
        return f"{self.prefix}resp:{owner}:{response_id}"

    async def get(self, tenant: str | None, response_id: str) -> StoredResponse | None:
        try:
            raw = await self.client.command("GET", self._key(tenant, response_id))
        except (ConnectionError, TimeoutError, OSError, RespError) as e:
            raise unavailable(e) from None
        return None if raw is None else StoredResponse.model_validate_json(raw)

    async def put(self, tenant: str | None, record: StoredResponse) -> None:
        key = self._key(tenant, record.response.id)
        try:
            await self.client.command("SET", key, record.model_dump_json(), "PX",
                                      str(self.ttl_ms))
        except (ConnectionError, TimeoutError, OSError, RespError) as e:
            log.warning("responses: %s not stored (%s)", record.response.id, e)

    async def delete(self, tenant: str | None, response_id: str) -> bool:
        try:
            return bool(await self.client.command("DEL", self._key(tenant, response_id)))
        except (ConnectionError, TimeoutError, OSError, RespError) as e:
            raise unavailable(e) from None

    def close(self) -> None:
        self.client.close()


def unavailable(error: Exception) -> APIError:
    log.warning("responses: redis unavailable (%s)", error)
    return APIError(503, "The response store is unavailable; try again shortly",
                    code="store_unavailable")


def open_response_store(config: GatewayConfig) -> ResponseStore:
    """Redis when the config names it, else this process's memory."""
    settings = config.responses
    if config.redis:
        return RedisResponseStore(config.redis, settings.ttl_s)
    return MemoryResponseStore(settings.ttl_s, settings.max_entries)
