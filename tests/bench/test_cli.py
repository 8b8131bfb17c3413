"""`headstart bench` end to end: a short real run against a live gateway writes every file."""

import importlib.util
import json
import subprocess

import httpx
import pytest

from bench.cli import build_parser, parse_sizes
from bench.harness.targets import MODEL_NAME, gateway_config
from bench.harness.workloads import FAQ_SYSTEM, WorkloadSizes, build_sessions
from tests.support.processes import ServerProcess, free_port, headstart_cmd

ADMIN_KEY = "bench-admin"


def test_parser_defaults_match_the_contract():
    args = build_parser().parse_args(["--base-url", "http://x"])
    assert (args.workload, args.rate, args.slo_ms, args.sweep) == ("chat", 1.0, 700.0, False)
    sizes = parse_sizes(["turns=2", "docs=3"], max_tokens=5)
    assert (sizes.turns, sizes.docs, sizes.max_tokens) == (2, 3, 5)
    with pytest.raises(ValueError):
        parse_sizes(["turns"], None)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    for module in ("gateway.app", "engine.async_engine"):
        try:
            importlib.util.find_spec(module)
            __import__(module)
        except ImportError as exc:
            pytest.skip(f"{module} is not importable yet: {exc}")
    import yaml

    config = tmp_path_factory.mktemp("gw") / "bench.yaml"
    config.write_text(yaml.safe_dump(gateway_config(features=True, admin_key=ADMIN_KEY)))
    port = free_port()
    server = ServerProcess(headstart_cmd("serve", "--config", str(config), "--port", str(port)),
                           port, timeout_s=300).start()
    yield server
    server.stop()


@pytest.mark.timeout(420)
def test_short_real_run_writes_every_output_file(gateway, tmp_path):
    """FAQ run over 3 questions whose plain wording is preloaded through the admin API:
    plain repeats are exact hits, rewordings semantic hits or misses (the engine answers)."""
    sizes = WorkloadSizes(faq_questions=3, reword_prob=0.0)
    plain = {s.turns[0].user for s in build_sessions("faq", 100, seed=1, sizes=sizes, pool_seed=0)}
    assert len(plain) == 3
    for question in plain:
        r = httpx.post(f"{gateway.base_url}/admin/cache/entries",
                       headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                       json={"route": "bench", "response": "See the help page.",
                             "params": {"temperature": 0.0, "max_tokens": 4},
                             "messages": [{"role": "system", "content": FAQ_SYSTEM},
                                          {"role": "user", "content": question}]})
        assert r.status_code == 200, r.text
    out = tmp_path / "report"
    done = subprocess.run(
        headstart_cmd("bench", "--base-url", gateway.base_url, "--model", MODEL_NAME,
                      "--workload", "faq", "--rate", "2", "--duration", "3", "--warmup-s", "1",
                      "--max-tokens", "4", "--out", str(out), "--no-progress",
                      "--size", "faq_questions=3", "--size", "reword_prob=0.2", "--drain-s", "30"),
        capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    names = sorted(p.name for p in out.iterdir())
    assert names == ["p95_ttft_vs_rate_faq.png", "report.html", "report.json", "report.md",
                     "ttft_cdf_faq.png"]
    run = json.loads((out / "report.json").read_text())["runs"][0]
    assert run["requests"] > 0 and run["errors"] == 0, run
    assert run["ttft_ms"]["p50"] > 0
    assert set(run["cache"]) <= {"exact", "semantic", "miss", "bypass"}
    assert run["cache"].get("exact", 0) + run["cache"].get("semantic", 0) > 0  # repeats hit
    assert "| faq | 2 |" in (out / "report.md").read_text()
    assert "TTFT p95" in done.stdout
    assert "[bench] primed 3/3 faq groups" in done.stderr  # each question family, once
