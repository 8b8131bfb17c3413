"""Property-based fuzzing of the gateway's whole HTTP surface from its OpenAPI document
(schemathesis over hypothesis): requests that follow the schema and requests that break
it, against a real gateway with the bundled engine, API keys and the exact cache.

Every answer must be below 500, arrive within the client's timeout (120 s: no hangs; the
engine's context is 64 tokens, so the longest valid answer is short), and every error must
be an OpenAI-style body (the dashboard's pages may answer a person in HTML instead). `make test` runs a small, derandomised set per
endpoint; `pytest -m slow tests/gateway/test_fuzz.py` runs at least 1,000 per endpoint.
After the fuzzing the gateway still answers and the engine holds no KV blocks.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.gateway.conftest import GatewayThread, wait_until
from tests.gateway.openapi_spec import gateway_openapi

MODEL = "smollm2-135m-instruct"
KEY, ADMIN = "fuzz-key", "fuzz-admin"
CONFIG = {
    "auth": {"admin_key": ADMIN, "keys": [{"key": KEY, "tenant": "fuzzers", "rpm": 100000}]},
    "limits": {"max_body_bytes": 65536, "max_queue_s": 30},
    "upstreams": {"local": {"kind": "engine", "engine": {
        "kv_cache_memory_mb": 32, "max_model_len": 64, "max_num_seqs": 4}}},
    "routes": [{"name": "plain", "models": [MODEL], "upstream": "local"},
               {"name": "cached", "models": ["cached"], "upstream": "local",
                "cache": {"exact": {"enabled": True}}}],
}
SPEC = gateway_openapi(create_app(GatewayConfig.from_dict(CONFIG)), [MODEL, "cached"],
                       ["plain", "cached"])
SCHEMA = schemathesis.openapi.from_dict(SPEC)
OPERATIONS = sorted((method.upper(), path) for path, item in SPEC["paths"].items()
                    for method in item)
PAGES = ("/dashboard",)  # the browser's pages: their errors may be HTML for a person
SIZE_CAPS = {"n": 2, "max_tokens": 8, "max_completion_tokens": 8, "max_output_tokens": 8,
             "top_logprobs": 3}


def tame(case: Any) -> Any:
    """Cap the few fields that make a valid request expensive (choices, answer length,
    batch size): the fuzzing is after the surface, not after a long generation."""
    body = case.body
    if isinstance(body, dict):
        for name, cap in SIZE_CAPS.items():
            if isinstance(body.get(name), int) and not isinstance(body[name], bool) \
                    and body[name] > cap:
                body[name] = cap
        for name in ("prompt", "input"):
            if isinstance(body.get(name), list) and len(body[name]) > 4:
                body[name] = body[name][:4]
    return case


def assert_openai_error(response: Any) -> None:
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert "param" in error and "code" in error


def fuzz(base_url: str, method: str, path: str, examples: int, derandomize: bool) -> Counter:
    """Run `examples` generated requests of each mode against one operation; the count of
    answers by status class."""
    seen: Counter = Counter()
    key = ADMIN if path.startswith(("/admin", "/dashboard")) else KEY
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    while modes:
        mode = modes.pop(0)
        strategy = SCHEMA[path][method].as_strategy(generation_mode=mode).map(tame)

        @settings(max_examples=examples, deadline=None, database=None,
                  derandomize=derandomize, suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def one(case: Any) -> None:
            response = case.call(base_url=base_url, timeout=120,
                                 headers={"authorization": f"Bearer {key}"})
            seen[f"{response.status_code // 100}xx"] += 1
            assert response.status_code < 500, (response.status_code, response.text[:500])
            kind = response.headers.get("content-type") or ""  # schemathesis: a list
            kind = kind[0] if isinstance(kind, list) else kind
            page = path.startswith(PAGES) and kind.startswith("text/html")
            if response.status_code >= 400 and not page:  # a browser page may answer in HTML
                assert_openai_error(response)

        try:
            one()
        except Unsatisfiable:
            if mode is GenerationMode.POSITIVE:
                raise
            modes.append(GenerationMode.POSITIVE)  # inputs that cannot be broken (headers
            # only): as many valid cases instead
    return seen


@pytest.fixture(scope="module")
def fuzzed_gateway():
    server = GatewayThread(CONFIG).start()
    yield server
    server.stop()


def settled(gateway: GatewayThread) -> bool:
    stats = gateway.app.state.engine.stats()
    return stats.kv_blocks_used == 0 and stats.num_running == 0 and stats.num_waiting == 0


def still_serving(gateway: GatewayThread) -> None:
    answer = httpx.post(gateway.base_url + "/v1/chat/completions", timeout=60,
                        headers={"authorization": f"Bearer {KEY}"},
                        json={"model": MODEL, "max_tokens": 2,
                              "messages": [{"role": "user", "content": "Hi"}]})
    assert answer.status_code == 200
    assert wait_until(lambda: settled(gateway), 30)


@pytest.mark.parametrize("method,path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_fuzzed_requests_get_no_5xx_and_openai_errors(fuzzed_gateway, method, path):
    seen = fuzz(fuzzed_gateway.base_url, method, path, examples=12, derandomize=True)
    assert sum(seen.values()) >= 12
    still_serving(fuzzed_gateway)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("method,path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_a_thousand_fuzzed_requests_per_endpoint(fuzzed_gateway, method, path):
    seen = fuzz(fuzzed_gateway.base_url, method, path, examples=500, derandomize=False)
    print(f"{method} {path}: {dict(seen)}")
    assert sum(seen.values()) >= 1000
    still_serving(fuzzed_gateway)
