"""Grey-zone judging through a live gateway (`headstart engine` upstream, a scripted judge
upstream): the miss is answered as before and promoted after; a judge that is down changes
nothing but the promotion count; a stalled judge delays no request; /metrics and the
dashboard's data carry the route's error budget."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from cache.pair_model import WEIGHTS
from tests.gateway.conftest import GatewayThread, wait_until
from tests.support.processes import free_port

SHIPPED = json.loads(WEIGHTS.with_suffix(".json").read_text())["threshold"]  # the bar unjudged

ADMIN = "admin-secret"
CAPITAL = "What is the capital of Australia?"
SEAT = "Which city serves as Australia's seat of government?"  # the verifier: about 0.52
YES = (b'data: {"id":"j","object":"chat.completion.chunk","created":0,"model":"judge",'
       b'"choices":[{"index":0,"delta":{"role":"assistant","content":"yes"},'
       b'"finish_reason":null}]}\n\n'
       b'data: {"id":"j","object":"chat.completion.chunk","created":0,"model":"judge",'
       b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


def route(name: str, judge: str | None, **judging) -> dict:
    semantic: dict = {"enabled": True}
    if judge is not None:
        semantic["judge"] = {"upstream": judge, "rate_per_s": 20, **judging}
    return {"name": name, "models": [name], "upstream": "remote",
            "cache": {"exact": {"enabled": True}, "semantic": semantic}}


@pytest.fixture(scope="module")
def judge_upstream():
    from tests.gateway.conftest import ScriptedUpstream

    server = ScriptedUpstream()
    server.answer = (200, YES)
    yield server
    server.close()


@pytest.fixture(scope="module")
def gw(engine_server, judge_upstream, blackhole, tmp_path_factory):
    labels = tmp_path_factory.mktemp("labels")
    config = {
        "auth": {"admin_key": ADMIN},
        "upstreams": {
            "remote": {"kind": "openai", "base_url": engine_server.base_url + "/v1",
                       "model": "smollm2-135m-instruct"},
            "judge": {"kind": "openai", "base_url": judge_upstream.base_url, "model": "judge"},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"},
            "stalled": {"kind": "openai",
                        "base_url": f"http://127.0.0.1:{blackhole.port}/v1"},
        },
        "routes": [route("faq", "judge", labels=str(labels / "faq.jsonl")),
                   route("faq-down", "dead", labels=str(labels / "down.jsonl")),
                   route("faq-stalled", "stalled", timeout_s=5.0,
                         labels=str(labels / "stalled.jsonl")),
                   route("faq-plain", None)],
    }
    server = GatewayThread(config).start()
    server.labels = labels
    yield server
    server.stop()


def ask(gw, model: str, text: str, namespace: str) -> tuple[httpx.Response, float]:
    """One chat request at temperature 0 with short answers; (response, seconds). The stops
    end both questions' answers well within max_tokens (an answer cut at the length is not
    one the cache keeps for every request, so neither would be promoted)."""
    t0 = time.perf_counter()
    r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=60, headers={
        "x-cache-namespace": namespace}, json={
        "model": model, "temperature": 0, "max_tokens": 48, "stop": [".", ",", "(", "\n"],
        "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r, time.perf_counter() - t0


def counters(gw, name: str) -> dict:
    r = httpx.get(gw.base_url + "/admin/cache/stats",
                  headers={"Authorization": f"Bearer {ADMIN}"})
    return r.json()["routes"][name]


def content(r: httpx.Response) -> str:
    return r.json()["choices"][0]["message"]["content"]


def test_a_grey_zone_miss_is_answered_as_a_miss_then_promoted(gw):
    ns = uuid.uuid4().hex
    first, _ = ask(gw, "faq", CAPITAL, ns)
    seat, _ = ask(gw, "faq", SEAT, ns)
    assert [first.headers["x-cache"], seat.headers["x-cache"]] == ["miss", "miss"]
    assert wait_until(lambda: counters(gw, "faq")["promotions"] == 1)
    again, _ = ask(gw, "faq", SEAT, ns)  # the alias: the entry's answer, by its exact key
    assert again.headers["x-cache"] == "exact" and content(again) == content(first)
    other, _ = ask(gw, "faq", SEAT, uuid.uuid4().hex)  # another namespace: its own miss
    assert other.headers["x-cache"] == "miss"
    [line] = (gw.labels / "faq.jsonl").read_text().splitlines()
    assert '"same_answer": true' in line and '"category": "judged:upstream:judge:yes"' in line


def test_a_judge_upstream_that_is_down_changes_nothing_but_the_promotions(gw):
    ns = uuid.uuid4().hex
    down = [ask(gw, "faq-down", text, ns)[0] for text in (CAPITAL, SEAT, SEAT)]
    plain = [ask(gw, "faq-plain", text, ns)[0] for text in (CAPITAL, SEAT, SEAT)]
    assert [r.headers["x-cache"] for r in down] == [r.headers["x-cache"] for r in plain] \
        == ["miss", "miss", "exact"]
    assert [content(r) for r in down] == [content(r) for r in plain]
    assert wait_until(lambda: counters(gw, "faq-down")["judge_errors"] == 1)
    found = counters(gw, "faq-down")
    assert (found["promotions"], found["refusals"], found["grey_zone"]) == (0, 0, 1)


def test_a_stalled_judge_delays_no_request(gw):
    ns = uuid.uuid4().hex
    ask(gw, "faq-stalled", CAPITAL, ns)
    _, seat_s = ask(gw, "faq-stalled", SEAT, ns)  # its judge now waits on a silent upstream
    again, again_s = ask(gw, "faq-stalled", CAPITAL, ns)
    assert again.headers["x-cache"] == "exact"
    assert seat_s < 5.0 and again_s < 1.0  # neither waited for the judge's 5 s timeout
    assert counters(gw, "faq-stalled")["judge_errors"] == 0  # the judge is still waiting
    assert wait_until(lambda: counters(gw, "faq-stalled")["judge_errors"] == 1, 15)


def test_metrics_and_the_dashboard_carry_the_error_budget(gw):
    ask(gw, "faq", CAPITAL, uuid.uuid4().hex)
    text = httpx.get(gw.base_url + "/metrics").text
    assert 'headstart_cache_false_hit_estimate{route="faq"} 0.0' in text
    assert f'headstart_cache_judged_bar{{route="faq"}} {SHIPPED}' in text
    assert 'headstart_cache_promotions_total{route="faq"}' in text
    data = httpx.get(gw.base_url + "/dashboard/data",
                     headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert ["faq", SHIPPED] in data["families"]["headstart_cache_judged_bar"]["values"]
