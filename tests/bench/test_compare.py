"""`python -m bench.compare`: target order, and (slow) one real comparison end to end."""

import json

import pytest

from bench.compare import build_parser, main, ordered_targets


def test_the_baseline_runs_first():
    assert ordered_targets(["headstart", "litellm", "llama-server"]) == [
        "llama-server", "headstart", "litellm"]
    args = build_parser().parse_args([])
    assert args.targets.split(",")[0] == "headstart" and args.slo_ms == 700.0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compare_runs_a_target_and_writes_the_report(tmp_path):
    out = tmp_path / "cmp"
    code = main(["--targets", "headstart-off,nope", "--workloads", "faq", "--start-rate", "1",
                 "--max-rate", "1", "--refine", "0", "--duration", "3", "--warmup-s", "1",
                 "--max-tokens", "4", "--out", str(out), "--no-progress"])
    assert code == 0
    doc = json.loads((out / "report.json").read_text())
    assert "nope" in doc["meta"]["skipped_targets"]
    assert doc["sweeps"][0]["target"] == "headstart-off"
    assert (out / "ttft_cdf_faq.png").exists() and (out / "p95_ttft_vs_rate_faq.png").exists()


def test_reused_sweeps_round_trip_through_report_json(tmp_path):
    from bench.compare import load_sweeps
    from bench.harness.report import write_report
    from bench.harness.stats import RequestRecord, summarize
    from bench.harness.sweep import SweepResult

    def run(target, rate, ttft):
        rec = [RequestRecord(session_id="s", turn=0, sent_s=0.0, ttft_s=ttft,
                             e2e_s=None if ttft is None else ttft + 0.1, completion_tokens=2,
                             error=None if ttft is not None else "boom")]
        return summarize(rec, target=target, workload="chat", rate=rate, duration_s=1,
                         slo_ms=700)

    sweeps = [SweepResult("llama.cpp", "chat", 700, [run("llama.cpp", 1, 0.2),
                                                     run("llama.cpp", 2, None)]),
              SweepResult("headstart", "chat", 700, [run("headstart", 1, 0.1)])]
    paths = write_report(tmp_path, [r for s in sweeps for r in s.runs], slo_ms=700,
                         sweeps=sweeps)
    back = load_sweeps(str(paths["json"]), skip_targets={"headstart"})
    assert [s.target for s in back] == ["llama.cpp"]
    assert back[0].max_rate == 1 and back[0].points()[1][1] == float("inf")
    assert back[0].runs[0] == sweeps[0].runs[0]
