"""Workloads are deterministic from their seed and have the reuse each one promises."""

import pytest

from bench.harness.text import paragraphs, words_for_tokens
from bench.harness.workloads import WorkloadSizes, build_sessions

SMALL = WorkloadSizes(system_tokens=120, docs=3, doc_min_tokens=100, doc_max_tokens=150,
                      faq_questions=5, prompt_tokens=40, turns=3, apps=2)


@pytest.mark.parametrize("kind", ["chat", "rag", "faq", "unique"])
def test_same_seed_same_sessions_other_seed_other_sessions(kind):
    a = build_sessions(kind, 20, seed=7, sizes=SMALL)
    b = build_sessions(kind, 20, seed=7, sizes=SMALL)
    c = build_sessions(kind, 20, seed=8, sizes=SMALL)
    assert a == b
    assert a != c
    assert len(a) == 20


def test_chat_apps_share_long_system_prompts_across_users():
    sessions = build_sessions("chat", 30, seed=1, sizes=SMALL)
    systems = {s.system for s in sessions}
    assert len(systems) == 2
    assert all(len(s.turns) == 3 for s in sessions)
    assert sessions[0].turns[0].think_s == 0.0
    assert any(t.think_s > 0 for s in sessions for t in s.turns[1:])
    assert len({s.id for s in sessions}) == 30
    assert len(next(iter(systems)).split()) > 80  # hundreds of tokens


def test_rag_documents_repeat_and_faq_questions_repeat():
    rag = build_sessions("rag", 40, seed=2, sizes=SMALL)
    assert len({s.group for s in rag}) <= 3
    assert all(s.turns[0].user.startswith("Document ") for s in rag)
    faq = build_sessions("faq", 60, seed=2, sizes=SMALL)
    texts = [s.turns[0].user for s in faq]
    assert len(set(texts)) < len(texts)  # exact repeats
    by_group = {}
    for s in faq:
        by_group.setdefault(s.group, set()).add(s.turns[0].user)
    assert any(len(v) > 1 for v in by_group.values())  # rewordings of one question


def test_unique_prompts_are_all_different():
    texts = [s.turns[0].user for s in build_sessions("unique", 50, seed=3, sizes=SMALL)]
    assert len(set(texts)) == 50


def test_sizes_update_parses_types_and_rejects_unknown_names():
    sizes = WorkloadSizes().update({"turns": "6", "think_s": "0.5"})
    assert sizes.turns == 6 and sizes.think_s == 0.5
    with pytest.raises(ValueError, match="unknown workload size"):
        WorkloadSizes().update({"nope": "1"})
    with pytest.raises(ValueError, match="unknown workload"):
        build_sessions("video", 1, seed=0)


def test_text_size_tracks_the_token_target():
    import random

    text = paragraphs(random.Random(0), 1000)
    assert abs(len(text.split()) - words_for_tokens(1000)) < 40


def docs(sessions):
    return {s.turns[0].user.split("\n\nQuestion:")[0] for s in sessions}


def test_pool_seed_keeps_the_corpus_and_changes_the_traffic():
    a = build_sessions("rag", 30, seed=1, sizes=SMALL, pool_seed=9)
    b = build_sessions("rag", 30, seed=2, sizes=SMALL, pool_seed=9)
    assert docs(a) == docs(b)
    assert [s.turns[0].user for s in a] != [s.turns[0].user for s in b]
    chat_a = build_sessions("chat", 10, seed=1, sizes=SMALL, pool_seed=9)
    chat_b = build_sessions("chat", 10, seed=2, sizes=SMALL, pool_seed=9)
    assert {s.system for s in chat_a} == {s.system for s in chat_b}


def test_max_tokens_default_per_workload():
    assert WorkloadSizes().max_tokens_for("faq") == 128
    assert WorkloadSizes().max_tokens_for("chat") == 32
    assert WorkloadSizes(max_tokens=5).max_tokens_for("faq") == 5
