"""The Grafana side of `docker compose --profile monitoring`, checked offline: the provisioned
datasource is the one every panel names, Prometheus scrapes the services compose runs, and
every PromQL expression of the dashboard reads series that a real gateway and a real
`headstart engine` export (after traffic), with the labels it selects and groups by."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import GatewayThread
from tests.support.processes import REPO, free_port

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "headstart.json"
METRIC = re.compile(r"\b(headstart_[a-z0-9_]+)(\{[^}]*\})?")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
PROMQL_WORDS = {"sum", "rate", "histogram_quantile", "by"}


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def test_every_panel_reads_the_provisioned_datasource():
    sources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml")
                             .read_text())["datasources"]
    (source,) = sources
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    found = panels()
    assert len(found) >= 15 and len({p["id"] for p in found}) == len(found)
    for panel in found:
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}, panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/headstart.yml")
                               .read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_prometheus_scrapes_what_compose_runs():
    scrape = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"]
    targets = {t for job in scrape for c in job["static_configs"] for t in c["targets"]}
    assert targets == {"gateway:8000", "engine:8001"}
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert "--port" in compose["gateway"]["command"] and "8000" in compose["gateway"]["command"]
    assert "8001" in compose["engine"]["command"]
    volumes = compose["prometheus"]["volumes"] + compose["grafana"]["volumes"]
    for volume in volumes:
        assert (REPO / volume.split(":")[0]).exists(), volume


def test_expressions_are_balanced_promql():
    for expr in expressions():
        depth = 0
        for char in expr:
            depth += {"(": 1, ")": -1}.get(char, 0)
            assert depth >= 0, expr
        assert depth == 0 and expr.count("{") == expr.count("}"), expr
        words = set(re.findall(r"\b([a-z_]+)\s*\(", expr)) - PROMQL_WORDS
        assert not words, f"{expr}: unexpected functions {words}"


@pytest.fixture(scope="module")
def scraped(engine_server) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets it has, over a gateway in front of `headstart engine`
    (the compose stack's shape, and the same engine as a one-replica fleet) and that engine,
    after cached, fallback, failed and fleet requests."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = GatewayThread({
        "upstreams": {"engine": {"kind": "openai", "base_url": engine_server.base_url + "/v1",
                                 "model": "smollm2-135m-instruct"},
                      "dead": {"kind": "openai", "base_url": dead},
                      "fleet": {"kind": "openai", "model": "smollm2-135m-instruct",
                                "endpoints": [engine_server.base_url + "/v1"]}},
        "routes": [
            {"name": "support", "models": ["support"], "upstream": "engine",
             "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}}},
            {"name": "backup", "models": ["backup"], "upstream": "dead", "fallback": "engine"},
            {"name": "down", "models": ["down"], "upstream": "dead"},
            {"name": "replicas", "models": ["replicas"], "upstream": "fleet"},
        ]}).start()
    try:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="x", max_retries=0)
        ask = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
               "max_tokens": 16, "temperature": 0, "stop": [".", "\n"]}
        for model in ("support", "support", "backup", "replicas"):
            client.chat.completions.create(model=model, **ask)
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="down", **ask)
        texts = [httpx.get(url + "/metrics").text
                 for url in (gateway.base_url, engine_server.base_url)]
    finally:
        gateway.stop()
    samples: dict[str, list[dict[str, str]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append(s.labels)
    return samples


def test_every_series_the_dashboard_reads_exists(scraped):
    checked = set()
    for expr in expressions():
        names = []
        for name, selector in METRIC.findall(expr):
            assert name in scraped, f"{expr}: no series {name} in /metrics"
            names.append(name)
            for label, value in re.findall(r'(\w+)="([^"]*)"', selector or ""):
                assert any(labels.get(label) == value for labels in scraped[name]), \
                    f"{expr}: no {name} with {label}={value!r}"
            checked.add(name)
        for grouping in GROUPING.findall(expr):
            for label in (g.strip() for g in grouping.split(",")):
                assert any(label in labels for name in names for labels in scraped[name]), \
                    f"{expr}: grouped by {label!r}, which none of {names} has"
    assert {"headstart_engine_kv_blocks_used", "headstart_engine_kv_blocks_total",
            "headstart_engine_prefix_hit_tokens_total", "headstart_gateway_ttft_seconds_bucket",
            "headstart_gateway_cache_lookups_total", "headstart_cache_guard_rejections_total",
            "headstart_gateway_fallbacks_total", "headstart_endpoint_ttft_seconds_bucket",
            "headstart_endpoint_cached_tokens_total", "headstart_endpoint_healthy"} <= checked
