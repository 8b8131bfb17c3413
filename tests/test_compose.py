"""The docker compose stack: the file validates and its gateway config loads."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from gateway.config import load_config
from tests.support.processes import REPO


def test_compose_file_validates_with_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed here")
    out = subprocess.run([exe, "-f", "docker-compose.yml", "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    assert set(services) == {"redis", "engine", "gateway", "prometheus", "grafana"}
    assert {name for name, s in services.items() if s.get("profiles") == ["monitoring"]} == {
        "prometheus", "grafana"}  # only with `--profile monitoring`
    assert all("healthcheck" in s for s in services.values())
    assert services["gateway"]["depends_on"]["engine"]["condition"] == "service_healthy"


def test_stack_config_points_at_the_engine_and_redis() -> None:
    config = load_config(REPO / "deploy" / "headstart.compose.yaml")
    assert config.redis == "redis://redis:6379/0"
    engine = config.upstreams["engine"]
    assert engine.kind == "openai" and engine.base_url == "http://engine:8001/v1"
    assert any(r.cache.semantic.enabled for r in config.routes)
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "/app/deploy/headstart.compose.yaml" in compose["services"]["gateway"]["command"]
