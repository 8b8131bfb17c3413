"""A deployment's judged pairs as training pairs (training/judged.py): the last verdict per
pair, grouped by the cached question, read from the log the gateway writes."""

from __future__ import annotations

import json

from cache.judgement import Judgement
from cache.labels import label
from training import judged


def write(path, lines) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_last_verdict_on_a_pair_wins_and_groups_follow_the_cached_question(tmp_path):
    yes = Judgement(True, "agreement", "agreed", 0.95)
    no = Judgement(False, "agreement", "dissimilar", 0.4)
    write(tmp_path / "r.jsonl", [label("r", "What is X?", "Tell me X.", yes, 0.6),
                                 label("r", "What is X?", "Tell me X.", no, 0.6),
                                 label("r", "What is X?", "What is Y?", no, 0.3),
                                 label("r", "Where is Z?", "Z is where?", yes, 0.7)])
    found = judged.pairs([tmp_path / "r.jsonl"])
    assert [(p["a"], p["b"], p["same_answer"]) for p in found] == [
        ("What is X?", "Tell me X.", False), ("What is X?", "What is Y?", False),
        ("Where is Z?", "Z is where?", True)]
    assert found[0]["group"] == found[1]["group"] != found[2]["group"]
    assert {p["source"] for p in found} == {"judged"}
    assert found[0]["category"] == "judged:agreement:no"


def test_no_log_adds_no_pairs():
    assert judged.pairs([]) == []
