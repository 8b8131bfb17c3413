"""How the reliability benchmarks count a run's requests (bench/harness/outcomes.py)."""

from __future__ import annotations

from bench.experiments.overload import Outcome, table
from bench.harness.outcomes import Tally
from bench.harness.stats import RequestRecord


def record(error: str | None = None, ttft_s: float | None = None) -> RequestRecord:
    r = RequestRecord(session_id="s", turn=0, sent_s=0.0, error=error, ttft_s=ttft_s)
    r.e2e_s = None if error else 1.0
    return r


def test_records_are_counted_by_what_became_of_them():
    tally = Tally()
    for r in [record(ttft_s=0.2), record(ttft_s=0.9),
              record("RateLimitError: Error code: 429 - server_busy"),
              record("InternalServerError: Error code: 500"),
              record("APIStatusError: Error code: 503 - upstream_unavailable"),
              record("APIConnectionError: Connection error.")]:
        tally.add(r)
    assert (tally.offered, tally.answered, tally.shed, tally.server_errors,
            tally.other_errors) == (6, 2, 1, 2, 1)
    assert tally.ttft_ms(50) == 550.0


def test_the_overload_table_gives_goodput_within_the_slo():
    run = Outcome("max_queue_s 1", "burst", seconds=2.0)
    run.tally.add(record(ttft_s=0.2))
    run.tally.add(record(ttft_s=0.9))
    assert table([run], 700).splitlines()[-1] == \
        "| burst | max_queue_s 1 | 2 | 2 | 0 | 0 | 0 | 550.0 / 865.0 | 50% | 0.50 |"
