"""Stored responses and the caches through live gateways with API keys and a shared Redis, in
front of `headstart engine` (`kind: openai`): a tenant never sees another's responses, two
gateways on one Redis continue each other's chains, the stored record expires after
`responses.ttl_s`, and the route's caches answer a repeated Responses request as they
answer chat."""

from __future__ import annotations

import openai
import pytest

from cache.stores.resp_client import RespClient
from tests.gateway.conftest import GatewayThread
from tests.gateway.test_cache_gateway import cache_config

KEYS = [{"key": "key-a", "tenant": "team-a"}, {"key": "key-b", "tenant": "team-b"}]
TTL_S = 90


@pytest.fixture(scope="module")
def pair(engine_server, redis_server):
    """Two gateways sharing one Redis, keyed for two tenants."""
    config = {**cache_config(engine_server.base_url, redis_server.url, keys=KEYS),
              "responses": {"ttl_s": TTL_S}}
    a, b = GatewayThread(config).start(), GatewayThread(config).start()
    yield a, b
    a.stop()
    b.stop()


def client(server: GatewayThread, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)


def create(c: openai.OpenAI, model: str = "plain", **fields):
    fields.setdefault("input", "Name a colour.")
    return c.responses.create(model=model, temperature=0, max_output_tokens=8, **fields)


def test_another_tenant_cannot_see_read_list_delete_or_continue_a_response(pair):
    first = create(client(pair[0]))
    other = client(pair[0], "key-b")
    for call in (lambda: other.responses.retrieve(first.id),
                 lambda: other.responses.input_items.list(first.id),
                 lambda: other.responses.delete(first.id),
                 lambda: create(other, previous_response_id=first.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert client(pair[0]).responses.retrieve(first.id).id == first.id


def test_a_missing_key_is_a_401_before_anything_is_read(pair):
    first = create(client(pair[0]))
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=pair[0].base_url + "/v1", api_key="wrong",
                      max_retries=0).responses.retrieve(first.id)


def test_gateways_sharing_redis_continue_each_others_chains(pair):
    first = create(client(pair[0]))
    assert client(pair[1]).responses.retrieve(first.id) == first
    second = create(client(pair[1]), previous_response_id=first.id, input="Another one?")
    (asked,) = client(pair[1]).responses.input_items.list(first.id).data
    items = client(pair[0]).responses.input_items.list(second.id, order="asc")
    assert [i.id for i in items.data][:2] == [asked.id, first.output[0].id]


async def test_a_stored_response_expires_after_the_configured_ttl(pair, redis_server):
    first = create(client(pair[0]))
    redis = RespClient(redis_server.url)
    try:
        keys = await redis.command("KEYS", f"hs:resp:*:{first.id}")
        assert len(keys) == 1 and b"team-a" not in keys[0]  # the tenant as a digest
        ttl_ms = await redis.command("PTTL", keys[0])
    finally:
        redis.close()
    assert (TTL_S - 10) * 1000 < ttl_ms <= TTL_S * 1000


def test_a_repeated_request_is_answered_from_the_routes_cache(pair):
    c = client(pair[0])
    ask = {"model": "faq", "input": "Say just: one two three", "temperature": 0,
           "max_output_tokens": 24}
    raw = c.responses.with_raw_response.create(**ask)
    first = raw.parse()
    assert raw.headers["x-cache"] == "miss" and first.status == "completed"
    again = c.responses.with_raw_response.create(**ask)
    second = again.parse()
    assert again.headers["x-cache"] == "exact" and "cache;dur=" in again.headers["server-timing"]
    assert second.output_text == first.output_text and second.id != first.id
    assert client(pair[0]).responses.retrieve(second.id).output_text == first.output_text
