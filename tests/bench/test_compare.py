"""`python -m bench.compare`: target order, and (slow) one real comparison end to end."""

import json

import pytest

from bench.compare import build_parser, main, ordered_targets


def test_the_baseline_runs_first():
    assert ordered_targets(["headstart", "litellm", "llama.cpp"]) == [
        "llama.cpp", "headstart", "litellm"]
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
