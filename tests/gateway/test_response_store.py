"""gateway/response_store.py: stored responses in memory (a fake clock for expiry) and in a
real Redis: kept per tenant, expiring after their TTL, a Redis outage a 503 on read and
never a failed answer on write."""

from __future__ import annotations

import pytest

from cache.stores.resp_client import RespClient
from gateway.response_store import MemoryResponseStore, RedisResponseStore, StoredResponse
from openai_api import APIError
from openai_api.responses import ResponsesRequest
from openai_api.responses_items import FunctionCallItem, MessageItem, OutputText, with_ids
from openai_api.responses_objects import ResponseObject


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(response_id: str = "resp_1") -> StoredResponse:
    request = ResponsesRequest.model_validate({"model": "m", "input": "hi"})
    response = ResponseObject.started(request, response_id, created_at=7)
    response.output = [MessageItem(id="msg_out", role="assistant", status="completed",
                                   content=[OutputText(text="hello")])]
    items = with_ids([MessageItem(role="user", content="hi"),
                      FunctionCallItem(call_id="call_1", name="f", arguments="{}")])
    return StoredResponse(response=response, input_items=items, session="resp_0")


async def test_memory_keeps_a_record_whole_for_its_own_tenant_only():
    store = MemoryResponseStore(ttl_s=60, max_entries=10)
    kept = record()
    await store.put("team-a", kept)
    got = await store.get("team-a", "resp_1")
    assert got == kept
    assert [type(i) for i in got.conversation()] == [MessageItem, FunctionCallItem, MessageItem]
    assert await store.get("team-b", "resp_1") is None
    assert await store.get(None, "resp_1") is None
    assert await store.delete("team-b", "resp_1") is False
    assert await store.delete("team-a", "resp_1") is True
    assert await store.get("team-a", "resp_1") is None


async def test_memory_forgets_a_record_after_its_ttl():
    clock = Clock()
    store = MemoryResponseStore(ttl_s=60, max_entries=10, clock=clock)
    await store.put(None, record())
    clock.now += 59.9
    assert await store.get(None, "resp_1") is not None
    clock.now += 0.2
    assert await store.get(None, "resp_1") is None


async def test_memory_drops_the_oldest_past_max_entries():
    store = MemoryResponseStore(ttl_s=60, max_entries=2)
    for n in (1, 2, 3):
        await store.put(None, record(f"resp_{n}"))
    assert [await store.get(None, f"resp_{n}") is not None for n in (1, 2, 3)] == \
        [False, True, True]


async def test_redis_keeps_a_record_per_tenant_with_its_ttl(redis_server):
    store = RedisResponseStore(redis_server.url, ttl_s=120, prefix="hs-test-store:")
    try:
        kept = record()
        await store.put("team-a", kept)
        assert await store.get("team-a", "resp_1") == kept
        assert await store.get("team-b", "resp_1") is None
        raw = RespClient(redis_server.url)
        ttl_ms = await raw.command("PTTL", store._key("team-a", "resp_1"))
        raw.close()
        assert 110_000 < ttl_ms <= 120_000
        assert await store.delete("team-a", "resp_1") is True
        assert await store.get("team-a", "resp_1") is None
    finally:
        store.close()


async def test_redis_down_is_a_503_on_read_and_a_skipped_write(fresh_redis):
    store = RedisResponseStore(fresh_redis.url, ttl_s=120)
    fresh_redis.stop()
    try:
        await store.put(None, record())  # logged, not raised: the answer is already sent
        with pytest.raises(APIError) as info:
            await store.get(None, "resp_1")
        assert (info.value.status, info.value.code) == (503, "store_unavailable")
    finally:
        store.close()
