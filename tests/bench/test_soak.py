"""The soak, short: `headstart serve` with every feature on under steady load, its resident
memory sampled; no 5xx, and memory within the soak's growth limit after the warm-up.
(The 30-minute soak is `python -m bench.experiments.soak`, docs/reliability.md.)"""

from __future__ import annotations

from bench.cli import main as bench_main
from bench.experiments import soak


async def test_a_short_soak_has_no_5xx_and_keeps_its_memory():
    server = soak.start_server()
    try:
        report = await soak.soak(server.base_url + "/v1", server.proc.pid, rate=1.0,
                                 duration_s=30, warmup_s=10, sample_s=2)
    finally:
        server.stop()
    assert report.tally.offered >= 15 and report.tally.answered == report.tally.offered
    assert report.tally.server_errors == 0
    assert len(report.rss_mb) >= 10 and report.rss_start_mb > 100
    assert report.passed, report.summary()


def test_the_bench_command_has_a_soak_mode(capsys):
    assert bench_main(["--soak", "--base-url", "http://127.0.0.1:9"]) == 2
    assert "--base-url needs --pid" in capsys.readouterr().err
