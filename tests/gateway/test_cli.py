"""The `headstart` command: usage, a bad config failing at start with file and key,
`headstart bench` loading bench/ from the checkout only when it runs, and `headstart serve
--config` as a real subprocess answering the SDK."""

from __future__ import annotations

import subprocess
import sys
from importlib.abc import MetaPathFinder

import openai
import pytest

from gateway import cli
from tests.support.processes import ServerProcess, free_port, headstart_cmd


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(headstart_cmd(*args), capture_output=True, text=True, timeout=120)


def test_usage():
    assert run("--help").returncode == 0 and "serve" in run("--help").stdout
    result = run("frobnicate")
    assert result.returncode == 2 and "unknown command" in result.stderr


def test_bench_is_loaded_from_the_checkout_only_when_it_runs(tmp_path):
    """Outside the repository's folder too: bench/ does not ship, the checkout has it."""
    code = ("import sys\nfrom gateway import cli\nassert 'bench' not in sys.modules\n"
            "sys.exit(cli.main(['bench', '--help']))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--base-url" in result.stdout


class _NoBench(MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "bench":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_bench_without_a_checkout_says_where_it_lives(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "CHECKOUT", tmp_path)  # an installed package: no bench/ beside it
    monkeypatch.setattr(sys, "meta_path", [_NoBench(), *sys.meta_path])
    for name in [n for n in sys.modules if n == "bench" or n.startswith("bench.")]:
        monkeypatch.delitem(sys.modules, name)
    assert cli.main(["bench", "--help"]) == 2
    assert "needs a checkout of the Headstart repository" in capsys.readouterr().err


def test_bad_config_fails_at_start(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("upstreams: {a: {kind: openai}}\nroutes: [{name: r, upstream: a}]\n")
    result = run("serve", "--config", str(path))
    assert result.returncode == 2
    assert f"{path}: upstreams.a: kind 'openai' needs base_url" in result.stderr


def test_serve_with_config(tmp_path, engine_server, monkeypatch):
    monkeypatch.setenv("H4_TEST_ENGINE_URL", engine_server.base_url)
    path = tmp_path / "headstart.yaml"
    path.write_text(
        "upstreams:\n"
        "  remote: {kind: openai, base_url: '${H4_TEST_ENGINE_URL}/v1', "
        "model: smollm2-135m-instruct}\n"
        "routes:\n"
        "  - {name: chat, models: ['*'], upstream: remote}\n")
    port = free_port()
    server = ServerProcess(headstart_cmd("serve", "--config", str(path), "--port", str(port)),
                           port, timeout_s=60).start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(model="any", max_tokens=3,
                                           messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content and r.model == "any"
    finally:
        server.stop()


def test_workers_refuse_an_in_process_engine():
    result = run("serve", "--workers", "2")  # the embedded default serves the engine
    assert result.returncode == 2 and "--workers needs remote upstreams" in result.stderr


def test_serve_with_workers(tmp_path, engine_server):
    path = tmp_path / "headstart.yaml"
    path.write_text(
        "upstreams:\n"
        f"  remote: {{kind: openai, base_url: '{engine_server.base_url}/v1'}}\n"
        "routes:\n"
        "  - {name: chat, models: ['*'], upstream: remote}\n")
    port = free_port()
    server = ServerProcess(headstart_cmd("serve", "--config", str(path), "--port", str(port),
                                         "--workers", "2"), port, timeout_s=90).start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        for _ in range(4):
            r = client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=2,
                                               messages=[{"role": "user", "content": "hi"}])
            assert r.choices[0].message.content
        assert "Started parent process" in server.output()
    finally:
        server.stop()


@pytest.mark.slow
def test_serve_embedded_default():
    """`headstart serve` with no config: the bundled engine as `smollm2-135m-instruct`."""
    port = free_port()
    server = ServerProcess(headstart_cmd("serve", "--port", str(port)), port).start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["smollm2-135m-instruct"]
        r = client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=3,
                                           messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content
    finally:
        server.stop()
