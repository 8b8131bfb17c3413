"""`kv_isolation: tenant`: one tenant's prompt never warms the engine's prefix cache for
another (the timing side channel), while each tenant's own repeats still reuse it. Real
gateways with API keys, the in-process engine and a `headstart engine` behind HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.config import GatewayConfig
from gateway.kv_isolation import cache_salt_for, tenant_salt
from tests.gateway.conftest import GatewayThread

DOC = ("Every ledger entry of the harbour office names the vessel, its master, the berth and "
       "the tide it sailed on, in that order. ") * 12
KEYS = [{"key": "key-a", "tenant": "team-a"}, {"key": "key-b", "tenant": "team-b"}]


def config(engine_url: str, isolation: str | None, local: bool = True) -> dict:
    route = {} if isolation is None else {"kv_isolation": isolation}
    upstreams = {"remote": {"kind": "openai", "base_url": engine_url + "/v1",
                            "model": "smollm2-135m-instruct"}}
    routes = [{"name": "remote", "models": ["remote"], "upstream": "remote", **route}]
    if local:
        upstreams["local"] = {"kind": "engine", "engine": {"kv_cache_memory_mb": 64}}
        routes.append({"name": "local", "models": ["local"], "upstream": "local", **route})
    return {"auth": {"keys": KEYS}, "upstreams": upstreams, "routes": routes}


@pytest.fixture(scope="module")
def keyed_gateway(engine_boot) -> Iterator[str]:
    """Keys for two tenants, the in-process engine and `headstart engine` behind HTTP."""
    server = GatewayThread(config(engine_boot.wait().base_url, None)).start()
    yield server.base_url
    server.stop()


def ask(base_url: str, key: str, model: str, question: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of one answer to DOC + `question`."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=120)
    answer = client.chat.completions.create(
        model=model, max_tokens=2, temperature=0,
        messages=[{"role": "system", "content": DOC}, {"role": "user", "content": question}])
    return answer.usage.prompt_tokens, answer.usage.prompt_tokens_details.cached_tokens


@pytest.mark.parametrize("model", ["local", "remote"])
def test_tenants_do_not_share_prefixes_by_default_with_keys(keyed_gateway, model):
    base = keyed_gateway
    question = f"Which berth? ({model})"  # a prompt no other test has sent to the engine
    prompt_tokens, first = ask(base, "key-a", model, question)
    assert first == 0
    assert ask(base, "key-b", model, question) == (prompt_tokens, 0)
    _, repeat = ask(base, "key-a", model, question)
    assert repeat >= 0.9 * prompt_tokens


def test_kv_isolation_none_lets_tenants_share(start_gateway, engine_server):
    base = start_gateway(config(engine_server.base_url, "none", local=False))
    prompt_tokens, first = ask(base, "key-a", "remote", "Which tide?")
    assert first == 0
    _, other = ask(base, "key-b", "remote", "Which tide?")
    assert other >= 0.9 * prompt_tokens


def test_the_salt_is_opaque_and_keeps_a_client_salt_inside_the_tenant():
    cfg = GatewayConfig.from_dict(config("http://127.0.0.1:9", None, local=False))
    route = cfg.routes[0]
    assert cache_salt_for(route, "team-a", None, keyed=True) == tenant_salt("team-a")
    assert "team-a" not in tenant_salt("team-a") and len(tenant_salt("team-a")) == 32
    assert cache_salt_for(route, "team-a", "s1", keyed=True) == tenant_salt("team-a") + ":s1"
    assert cache_salt_for(route, None, "s1", keyed=False) == "s1"  # an open gateway
    assert cache_salt_for(route, None, None, keyed=False) is None
