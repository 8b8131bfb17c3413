"""Priming picks one session per shared group of the pool: each app's system prompt and each
document once, nothing for `unique` traffic, with the messages a run would send."""

from __future__ import annotations

from bench.harness.loadgen import LoadConfig
from bench.harness.priming import priming_sessions
from bench.harness.session_pool import ActiveSession
from bench.harness.workloads import WorkloadSizes, build_sessions


def config(workload: str, **sizes) -> LoadConfig:
    return LoadConfig(base_url="http://x", model="m", workload=workload, seed=3,
                      sizes=WorkloadSizes(**sizes))


def test_one_session_per_app_and_per_document() -> None:
    chat = priming_sessions(config("chat", apps=3))
    assert [s.group for s in chat] == ["app0", "app1", "app2"]
    rag = priming_sessions(config("rag", docs=5))
    assert [s.group for s in rag] == [f"doc{d}" for d in range(5)]
    assert priming_sessions(config("unique")) == []  # no shared prefix to warm


def test_primed_prefixes_are_the_ones_the_runs_send() -> None:
    """The sweep's runs draw their documents from the same pool (pool_seed = seed)."""
    primed = {s.group: ActiveSession(s).start_turn()[1] for s in priming_sessions(config("rag"))}
    run = build_sessions("rag", 30, seed=12345, sizes=WorkloadSizes(), pool_seed=3)
    for session in run:
        sent = ActiveSession(session).start_turn()[1]
        document = sent[-1]["content"].rpartition("\n\nQuestion:")[0]
        assert primed[session.group][-1]["content"].startswith(document + "\n\nQuestion:")
        assert sent[0] == primed[session.group][0]  # the same system prompt
