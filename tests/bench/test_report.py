"""The report folder: Markdown tables, JSON and PNG plots from known summaries."""

import json
import math

from bench.harness.report import runs_table, write_report
from bench.harness.stats import RequestRecord, summarize
from bench.harness.sweep import SweepResult


def _run(target: str, rate: float, ttfts: list[float | None]):
    records = [RequestRecord(session_id=f"s{i}", turn=0, sent_s=float(i), ttft_s=t,
                             e2e_s=None if t is None else t + 0.2, completion_tokens=3,
                             prompt_tokens=50, cached_tokens=25, cache="miss",
                             error=None if t is not None else "timeout")
               for i, t in enumerate(ttfts)]
    return summarize(records, target=target, workload="chat", rate=rate, duration_s=10,
                     slo_ms=700)


def test_write_report_produces_every_file(tmp_path):
    fast = [_run("headstart", r, [0.1, 0.2, 0.3]) for r in (1, 2, 4)]
    slow = [_run("llama.cpp", 1, [0.5, 0.6, 0.65]), _run("llama.cpp", 2, [0.9, 2.0, None])]
    sweeps = [SweepResult("headstart", "chat", 700, fast), SweepResult("llama.cpp", "chat", 700, slow)]
    paths = write_report(tmp_path, fast + slow, slo_ms=700, sweeps=sweeps,
                         meta={"seed": 0}, goals_markdown="| goal | ok |")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["p95_ttft_vs_rate_chat.png", "report.html", "report.json", "report.md",
                     "ttft_cdf_chat.png"]
    for key in ("cdf_chat", "rate_chat"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paths[key].stat().st_size > 10_000
    text = paths["markdown"].read_text()
    assert "| headstart | chat | 4 | 290 | 1, 2, 4 |" in text
    assert "| llama.cpp | chat | 1 | 645 | 1, 2 |" in text
    assert "## Goals" in text and "∞" in text
    doc = json.loads(paths["json"].read_text())
    assert doc["sweeps"][1]["max_rate_within_slo"] == 1
    assert doc["sweeps"][1]["points"][1]["p95_ttft_ms"] == "inf"
    assert len(doc["runs"]) == 5 and doc["runs"][4]["ttfts_ms"][2] == "inf"


def test_runs_table_rows_in_ms_with_cache_and_goodput():
    run = _run("t", 2, [0.1, 0.3, None])
    assert math.isinf(run.p95_ttft_ms())
    row = runs_table([run]).splitlines()[2]
    assert row.startswith("| t | chat | 2 | 3 | 1 | 0 | 300 | ∞ | ∞ |")
    assert "| 67% | miss:3 | 50% |" in row
