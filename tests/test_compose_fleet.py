"""The fleet compose stack: three engine replicas publishing KV events, two gateways that
find them through DNS, Redis; the file validates and the gateway config loads."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from gateway.config import load_config
from tests.support.processes import REPO

COMPOSE = "deploy/docker-compose.fleet.yml"


def test_fleet_compose_file_validates_with_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed here")
    out = subprocess.run([exe, "-f", COMPOSE, "config"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    assert set(services) == {"redis", "engine", "gateway-a", "gateway-b"}
    assert services["engine"]["scale"] == 3
    assert "--kv-events" in services["engine"]["command"]
    assert all("healthcheck" in s for s in services.values())
    for name in ("gateway-a", "gateway-b"):
        gateway = services[name]
        assert gateway["depends_on"]["engine"]["condition"] == "service_healthy"
        assert "/app/deploy/headstart.fleet.yaml" in gateway["command"]
    ports = {services[n]["ports"][0]["published"] for n in ("gateway-a", "gateway-b")}
    assert ports == {8000, 8002}


def test_fleet_config_resolves_the_replicas_by_dns_and_follows_their_events() -> None:
    config = load_config(REPO / "deploy" / "headstart.fleet.yaml")
    fleet = config.upstreams["fleet"]
    assert fleet.endpoints == ["dns+http://engine:8001/v1"]
    assert fleet.kv_events == "tcp://{host}:5557" and fleet.balance == "prefix"
    assert config.redis == "redis://redis:6379/0"
    assert {r.upstream for r in config.routes} == {"fleet"}
