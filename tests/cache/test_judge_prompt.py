"""The judge upstream's prompt and the strict reading of its one-word reply
(cache/judge_prompt.py): anything but "yes" or "no" is unparseable, and unparseable is no."""

from __future__ import annotations

import pytest

from cache.judge_prompt import MAX_ANSWER_CHARS, messages, read_verdict


@pytest.mark.parametrize(("reply", "same", "reason"), [
    ("yes", True, "yes"), ("Yes.", True, "yes"), ("  **YES**\n", True, "yes"),
    ('"no"', False, "no"), ("No!", False, "no"),
    ("Yes, it does.", False, "unparseable"), ("yes no", False, "unparseable"),
    ("Probably", False, "unparseable"), ("", False, "unparseable"), ("y", False, "unparseable"),
])
def test_a_reply_is_read_strictly(reply, same, reason):
    verdict = read_verdict(reply, "upstream:strong")
    assert (verdict.same, verdict.reason, verdict.judge) == (same, reason, "upstream:strong")


def test_a_reply_cut_off_by_the_token_limit_is_unparseable():
    assert read_verdict("Yes", "upstream:strong", finished=False).reason == "unparseable"


def test_the_prompt_names_both_questions_and_the_answer_cut_to_length():
    system, user = messages("Which city is Australia's capital?", "What is the capital?",
                            "Canberra. " * 1000)
    assert system["role"] == "system" and "one word" in system["content"]
    assert "Which city is Australia's capital?" in user["content"]
    assert "What is the capital?" in user["content"]
    assert user["content"].count("Canberra.") == MAX_ANSWER_CHARS // len("Canberra. ")
