"""`/dashboard` in a real browser (Debian's headless Chromium over the DevTools protocol):
the login form, then known traffic through the official `openai` SDK against a gateway with
the bundled model, and every figure the page shows compared with the gateway's `/metrics`
(parsed with prometheus_client's own parser, quantiles computed here the way Prometheus's
histogram_quantile does). Values, not pixels; a screenshot is kept in the test's tmp dir."""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict

import httpx
import openai
import pytest
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.chromium import Chromium
from tests.gateway.conftest import GatewayThread
from tests.support.processes import free_port

ADMIN = "dashboard-admin-key"
KEY = "dashboard-team-key"
ROUTES = ("faq", "plain", "down")

pytestmark = pytest.mark.skipif(Chromium.missing() is not None,
                                reason=Chromium.missing() or "")


@pytest.fixture(scope="module")
def gw():
    server = GatewayThread({
        "auth": {"admin_key": ADMIN, "keys": [{"key": KEY, "tenant": "team"}]},
        "upstreams": {
            "local": {"kind": "engine", "engine": {"kv_cache_memory_mb": 128}},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"},
        },
        "routes": [
            {"name": "faq", "models": ["faq"], "upstream": "local",
             "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}}},
            {"name": "plain", "models": ["smollm2-135m-instruct"], "upstream": "local"},
            {"name": "down", "models": ["down"], "upstream": "dead"},
        ],
    }).start()
    yield server
    server.stop()


def add_endpoint_series(gateway: GatewayThread) -> None:
    """Per-endpoint series as a fleet upstream exports them (`headstart_endpoint_*`, labels
    upstream and endpoint), in the gateway's registry: the page reads them by their shape."""
    registry = gateway.app.state.metrics.registry
    labels = ["upstream", "endpoint"]
    requests = Counter("headstart_endpoint_requests", "d", [*labels, "outcome"],
                       registry=registry)
    requests.labels("fleet", "http://e1:8001/v1", "ok").inc(5)
    requests.labels("fleet", "http://e1:8001/v1", "error").inc(2)
    requests.labels("fleet", "http://e2:8001/v1", "ok").inc(3)
    Gauge("headstart_endpoint_in_flight", "d", labels, registry=registry).labels(
        "fleet", "http://e2:8001/v1").set(4)
    latency = Histogram("headstart_endpoint_ttft_seconds", "d", labels, buckets=(0.1, 0.5),
                        registry=registry)
    latency.labels("fleet", "http://e1:8001/v1").observe(0.05)


def send_known_traffic(base_url: str) -> list[str]:
    """Eight requests: x-cache of each answered one, in order; the last fails (503)."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0)
    seen = []
    for question in ("What is the capital of France?", "What is the capital of France?",
                     "um what is the capital of france", "What is 2+2?", "What is 2+3?"):
        raw = client.chat.completions.with_raw_response.create(
            model="faq", messages=[{"role": "user", "content": question}], temperature=0,
            max_tokens=48, stop=[".", ",", "\n"])  # short answers that end in "stop": stored
        seen.append(raw.headers["x-cache"])
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2-135m-instruct", messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8)
    seen.append(raw.headers["x-cache"])
    stream = client.chat.completions.create(
        model="smollm2-135m-instruct", messages=[{"role": "user", "content": "Count to 3."}],
        max_tokens=8, stream=True)
    seen.append("stream:" + str(len(list(stream)) > 1))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="down", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4)
    assert failed.value.status_code == 503
    return seen


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if not total:
        return None
    rank = q * total
    b = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if math.isinf(buckets[b][0]):
        return buckets[-2][0]
    start, below = (0.0, 0.0) if b == 0 else buckets[b - 1]
    end, count = buckets[b]
    return start + (end - start) * (rank - below) / (count - below)


class Scrape:
    """One `/metrics` text: sums of samples over the label sets that match."""

    def __init__(self, text: str) -> None:
        self.samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def total(self, name: str, **where: str) -> float:
        return sum(s.value for s in self.samples if s.name == name
                   and all(s.labels.get(k) == v for k, v in where.items()))

    def quantile(self, q: float, name: str, **where: str) -> float | None:
        buckets: dict[float, float] = defaultdict(float)
        for s in self.samples:
            if s.name == name + "_bucket" and all(s.labels.get(k) == v for k, v in where.items()):
                buckets[float(s.labels["le"])] += s.value
        return histogram_quantile(q, list(buckets.items())) if buckets else None


SHOWN = """Object.fromEntries([...document.querySelectorAll('[data-k]'), ...document.querySelectorAll('.tile [id]')]
  .map((e) => [e.dataset.k || e.id, [e.dataset.v, e.textContent]]))"""


def assert_shows(shown: dict, key: str, expected: float | None) -> None:
    """The element's raw value is `expected`, and its text says the same."""
    raw, text = shown[key]
    if expected is None:
        assert (raw, text) == ("", "–"), key
        return
    assert float(raw) == pytest.approx(expected, rel=1e-9, abs=1e-12), key
    if text.endswith(" ms"):
        assert abs(float(text[:-3]) - expected * 1000) <= (0.05 if expected < 0.01 else 0.5), key
    elif text.endswith("%"):
        assert abs(float(text[:-1]) - 100 * expected) <= 0.05, key
    else:
        assert text == str(round(expected)), key


def submit_login(page, key: str) -> None:
    page.evaluate("document.getElementById('key').value = ''")
    page.type_into("#key", key)
    page.evaluate("document.getElementById('login').requestSubmit()")


def test_the_page_shows_what_metrics_says(gw, tmp_path):
    base = gw.base_url
    add_endpoint_series(gw)
    with Chromium.launch(tmp_path / "profile") as browser:
        page = browser.page(width=1400, height=1000)
        page.goto(base + "/dashboard")
        assert page.evaluate("document.getElementById('login') !== null")  # the key first
        submit_login(page, "not-the-key")
        assert page.wait_for("document.getElementById('login-error')?.textContent") == \
            "Wrong admin key."
        submit_login(page, ADMIN)
        page.wait_for("document.getElementById('status') !== null")
        assert page.evaluate("location.href") == base + "/dashboard"  # the key is in no URL
        (cookie,) = [c for c in page.cookies(base + "/dashboard")
                     if c["name"] == "headstart_dashboard"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/dashboard" and ADMIN not in cookie["value"]
        assert page.evaluate("document.cookie") == ""  # page scripts cannot read it
        page.wait_for("Number(document.getElementById('status').dataset.polls) >= 1")
        first_poll = time.monotonic()

        seen = send_known_traffic(base)
        assert seen == ["miss", "exact", "semantic", "miss", "miss", "bypass", "stream:True"]
        page.wait_for("document.querySelector('[data-k=\"route/all/ok\"]')?.dataset.v === '7'"
                      " && document.querySelector('[data-k=\"route/all/errors\"]').dataset.v"
                      " === '1'")
        page.wait_for("Number(document.getElementById('status').dataset.polls) >= 2")
        shown = page.evaluate(SHOWN)
        window_s = time.monotonic() - first_poll
        m = Scrape(httpx.get(base + "/metrics").text)
        page.screenshot(tmp_path / "dashboard.png")

        # a page opened after the traffic shows it from its first poll: the gateway's own
        # samples of the last 15 minutes, not only what the page polled itself
        fresh = browser.page(width=1400, height=1000)
        fresh.goto(base + "/dashboard")
        first = json.loads(fresh.wait_for(
            "Number(document.getElementById('status').dataset.polls) >= 1 && JSON.stringify({"
            "samples: Number(document.getElementById('status').dataset.samples),"
            "points: Number(document.getElementById('chart-rate').dataset.points),"
            "replicas: !document.getElementById('endpoints-figure').hidden"
            " && Number(document.getElementById('chart-endpoints').dataset.points),"
            f"shown: {SHOWN}}})"))

    # per route, and all routes: since the gateway started
    expected_cache = {"faq": {"exact": 1, "semantic": 1, "miss": 3, "bypass": 0},
                      "plain": {"exact": 0, "semantic": 0, "miss": 0, "bypass": 2},
                      "down": {"exact": 0, "semantic": 0, "miss": 0, "bypass": 1}}
    for route in (*ROUTES, "all"):
        where = {"route": route} if route != "all" else {}
        for status in ("exact", "semantic", "miss", "bypass"):
            count = m.total("headstart_gateway_cache_lookups_total", status=status, **where)
            if route != "all":
                assert count == expected_cache[route][status]
            assert_shows(shown, f"route/{route}/{status}", count)
        assert_shows(shown, f"route/{route}/ok",
                     m.total("headstart_gateway_requests_total", outcome="ok", **where))
        assert_shows(shown, f"route/{route}/errors",
                     m.total("headstart_gateway_requests_total", outcome="error", **where))
        assert_shows(shown, f"route/{route}/rejections",
                     m.total("headstart_cache_guard_rejections_total", **where))
        for q in (0.5, 0.95):
            assert_shows(shown, f"route/{route}/ttft_p{round(q * 100)}",
                         m.quantile(q, "headstart_gateway_ttft_seconds", **where))
    assert m.total("headstart_cache_guard_rejections_total", route="faq") == 1  # 2+3 is not 2+2
    assert_shows(shown, "route/all/hit_ratio", 2 / 8)

    # upstreams: the engine answered the five requests no cache did; the dead one failed once
    for name, ok, errors in (("local", 5, 0), ("dead", 0, 1)):
        assert_shows(shown, f"upstream/{name}/ok", ok)
        assert_shows(shown, f"upstream/{name}/error", errors)
        assert_shows(shown, f"upstream/{name}/p95", m.quantile(
            0.95, "headstart_gateway_upstream_seconds", upstream=name, outcome="ok"))

    # the in-process engine's own series, as `headstart engine` names them
    for metric in ("kv_blocks_used", "kv_blocks_cached", "kv_blocks_total",
                   "num_requests_running", "num_requests_waiting"):
        assert_shows(shown, f"engine/engine/{metric}", m.total(f"headstart_engine_{metric}"))
    for metric in ("prompt_tokens", "prefix_hit_tokens", "preemptions"):
        assert_shows(shown, f"engine/engine/{metric}",
                     m.total(f"headstart_engine_{metric}_total"))
    assert m.total("headstart_engine_prompt_tokens_total") > 0
    assert_shows(shown, "engine/engine/ttft_p95",
                 m.quantile(0.95, "headstart_engine_time_to_first_token_seconds"))
    assert m.total("headstart_engine_time_to_first_token_seconds_count") == 5
    used, pool = (m.total(f"headstart_engine_kv_blocks_{k}") for k in ("used", "total"))
    assert shown["tile-kv"] == [str(round(used)), f"{used:.0f} / {pool:.0f}"]
    assert_shows(shown, "tile-queue", m.total("headstart_engine_num_requests_waiting"))

    # per-endpoint series, read generically: one row per (upstream, endpoint)
    e1, e2 = "endpoint/fleet/http://e1:8001/v1/", "endpoint/fleet/http://e2:8001/v1/"
    assert_shows(shown, e1 + 'headstart_endpoint_requests/{"outcome":"ok"}', 5)
    assert_shows(shown, e1 + 'headstart_endpoint_requests/{"outcome":"error"}', 2)
    assert_shows(shown, e2 + 'headstart_endpoint_requests/{"outcome":"ok"}', 3)
    assert_shows(shown, e2 + "headstart_endpoint_in_flight/{}", 4)
    assert_shows(shown, e1 + "headstart_endpoint_in_flight/{}", 0)
    raw, text = shown[e1 + "headstart_endpoint_ttft_seconds/{}"]  # one in (0, 0.1]: p95 0.095
    assert float(raw) == pytest.approx(m.quantile(0.95, "headstart_endpoint_ttft_seconds",
                                                  endpoint="http://e1:8001/v1")) == 0.095
    assert text == "95 ms (1)"
    assert shown[e2 + "headstart_endpoint_ttft_seconds/{}"] == ["", "– (0)"]

    # the tiles' last minute holds all the traffic (the page's first poll came before it)
    if window_s < 50:
        assert_shows(shown, "tile-ttft-p95", m.quantile(0.95, "headstart_gateway_ttft_seconds"))
        assert_shows(shown, "tile-ttft-p50", m.quantile(0.5, "headstart_gateway_ttft_seconds"))
        assert_shows(shown, "tile-cache", 2 / 8)
        assert shown["tile-rate-sub"][1] == "8 requests (1 failed) in the last minute"
        prefix = (m.total("headstart_engine_prefix_hit_tokens_total")
                  / m.total("headstart_engine_prompt_tokens_total"))
        assert_shows(shown, "tile-prefix", prefix)
        opened = first["shown"]
        assert opened["tile-rate-sub"][1] == "8 requests (1 failed) in the last minute"
        assert_shows(opened, "tile-ttft-p95", m.quantile(0.95, "headstart_gateway_ttft_seconds"))
        assert_shows(opened, "tile-cache", 2 / 8)
    assert first["samples"] >= 2 and first["points"] >= 2  # charts drawn on the first poll
    assert first["replicas"] == first["points"]  # and one of attempts per fleet endpoint
    png = (tmp_path / "dashboard.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_the_data_feed_carries_the_metrics_families(gw):
    """What the page reads: the same registry as /metrics, the admin key in a header."""
    r = httpx.get(gw.base_url + "/dashboard/data", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    data = json.loads(r.text)
    assert data["slo_ms"] == 700.0 and data["guarded"] is True
    assert [route["name"] for route in data["routes"]] == list(ROUTES)
    assert data["upstreams"] == {"local": "engine", "dead": "openai"}
    family = data["families"]["headstart_engine_kv_blocks_total"]
    assert family["type"] == "gauge" and family["values"][0][-1] > 0
