"""The caches as an SDK user meets them: API keys on, curated answers through the admin API,
requests as the `openai` SDK sends them by default (no temperature, no max_tokens)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import GatewayThread
from tests.gateway.test_cache_gateway import ADMIN, cache_config

KEYS = [{"key": "key-a", "tenant": "team-a"}, {"key": "key-b", "tenant": "team-b"}]


@pytest.fixture(scope="module")
def gw(engine_server):
    config = cache_config(engine_server.base_url, keys=KEYS)
    config["routes"].append({"name": "support", "models": ["support"], "upstream": "remote",
                             "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}}})
    server = GatewayThread(config).start()
    yield server
    server.stop()


def sdk(gw, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url + "/v1", api_key=key, max_retries=0)


def curate(gw, question: str, answer: str, **kw) -> None:
    body = {"route": "support", "messages": [{"role": "user", "content": question}],
            "response": answer, **kw}
    r = httpx.post(gw.base_url + "/admin/cache/entries", json=body,
                   headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text


def ask(client: openai.OpenAI, question: str, **kw):
    """(headers, text) for a question sent the SDK's default way (no temperature)."""
    raw = client.chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": question}], **kw)
    return raw.headers, raw.parse().choices[0].message.content


def test_a_curated_answer_without_a_tenant_serves_every_tenant_at_the_sdk_default(gw):
    answer = "Open Settings, then Security, then Reset password."
    curate(gw, "How do I reset my password?", answer)
    for key in ("key-a", "key-b"):
        h, text = ask(sdk(gw, key), "How do I reset my password?")
        assert (h["x-cache"], text) == ("exact", answer)
        h, text = ask(sdk(gw, key), "How can I reset my password?")
        assert (h["x-cache"], text) == ("semantic", answer)
        h, text = ask(sdk(gw, key), "Resetting my password: how is it done?")
        assert (h["x-cache"], text) == ("semantic", answer)
        assert "x-cache-similarity" not in h  # its key words found it before any embedding


def test_a_typo_or_a_moved_clause_is_served_the_curated_answer_and_a_near_miss_is_not(gw):
    answer = "Up to 30 days after delivery, unopened."
    curate(gw, "Can I return an item after opening it?", answer)
    client = sdk(gw, "key-b")
    for question in ("Can I retrun an item after opening it?",
                     "After opening it, can I return an item?"):
        h, text = ask(client, question)
        assert (h["x-cache"], text) == ("semantic", answer)
    h, text = ask(client, "Can I exchange an item after opening it?", max_tokens=16)
    assert h["x-cache"] == "miss" and text != answer  # 16 tokens: the answer would fit


def test_a_prefixed_opposite_or_a_look_alike_identifier_is_not_served_the_curated_answer(gw):
    # without the exact checks the verifier would serve both: scores 0.9995 and 0.9976
    answers = {"Why did my account get locked?": "Five wrong passwords in a row.",
               "What does strncpy do?": "Copies at most n characters of a string."}
    for question, answer in answers.items():
        curate(gw, question, answer)
    client = sdk(gw, "key-b")
    for question in ("Whats the reason my account got unlocked?", "What does strcnpy do?"):
        h, text = ask(client, question, max_tokens=16)  # room for the curated answer
        assert h["x-cache"] == "miss" and text not in answers.values()


def test_a_curated_answer_with_a_tenant_serves_only_that_tenant(gw):
    curate(gw, "Who is our account manager?", "Dana, dana@example.com", tenant="team-a")
    h, text = ask(sdk(gw, "key-a"), "Who is our account manager?")
    assert (h["x-cache"], text) == ("exact", "Dana, dana@example.com")
    h, text = ask(sdk(gw, "key-b"), "Who is our account manager?", max_tokens=4)
    assert h["x-cache"] == "miss" and "dana@example.com" not in (text or "")


def test_a_complete_answer_serves_any_max_tokens_it_fits_in(gw):
    answer = "Yes, we ship to Canada."  # 23 characters: counted as 6 tokens
    curate(gw, "Do you ship to Canada?", answer)
    client = sdk(gw, "key-a")
    for limit in (6, 8, 200):
        h, text = ask(client, "Do you ship to Canada?", max_tokens=limit)
        assert (h["x-cache"], text) == ("exact", answer)
    h, _ = ask(client, "Do you ship to Canada?", max_tokens=5)
    assert h["x-cache"] == "miss"  # the whole answer would not fit: asked upstream


@pytest.mark.parametrize(("kw", "headers", "reason"), [
    ({"n": 2}, {}, "n"),
    ({"logprobs": True}, {}, "logprobs"),
    ({}, {"Cache-Control": "no-cache"}, "no-cache"),
])
def test_a_skipped_lookup_says_why(gw, kw, headers, reason):
    raw = sdk(gw, "key-a").chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=4, extra_headers=headers, **kw)
    assert (raw.headers["x-cache"], raw.headers["x-cache-bypass-reason"]) == ("bypass", reason)


def test_a_hot_request_skips_the_semantic_lookup_and_says_so(gw):
    h, _ = ask(sdk(gw, "key-a"), "Name a season.", temperature=1.5, max_tokens=4)
    assert (h["x-cache"], h["x-cache-bypass-reason"]) == ("miss", "semantic:temperature")
