"""Decomposition planning: what is split, what is left alone, shared prefixes, map-reduce."""

from __future__ import annotations

import pytest

from prompts import decompose as dec


@pytest.mark.parametrize("text, parts", [
    ("Answer these:\n1. Name a prime number.\n2. Name a primary colour.\n3. Who wrote Hamlet?",
     3),
    ("- Capital of Peru?\n- Boiling point of water in Fahrenheit?", 2),
    ("What is the capital of France? What is the largest planet in the solar system?", 2),
    ("Please help. How many legs does a spider have? Who painted the Mona Lisa?", 2),
])
def test_splits_independent_items(text, parts):
    plan = dec.split_turn(text)
    assert plan is not None and len(plan.parts) == parts


@pytest.mark.parametrize("text", [
    "Tell me a story about a dragon.",
    "What is Python? How is it used?",  # refers back
    "Steps:\n1. open the box\n2. take out the manual\nThen tell me what to do next.",
    "Why is the sky blue?",
    "Compare these:\n1. cats\n2. dogs\nWhich do you prefer?",
    "Here is my essay.\n\nWhat do you think? Is it good enough to submit?",
])
def test_leaves_the_rest_alone(text):
    assert dec.split_turn(text) is None


def test_max_parts_is_respected():
    text = "\n".join(f"{i}. Question number {i}?" for i in range(1, 9))
    assert dec.split_turn(text, max_parts=6) is None
    assert len(dec.split_turn(text, max_parts=8).parts) == 8


def test_sub_requests_share_the_prefix():
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "Quiz:\n1. Name a fruit.\n2. Name a metal."}]
    plan = dec.split_turn(messages[-1]["content"])
    subs = [dec.sub_request_messages(messages, plan, i) for i in range(2)]
    assert subs[0][:3] == subs[1][:3] == messages[:3]
    assert subs[0][-1]["content"] == "Quiz:\nName a fruit."
    assert subs[1][-1]["content"] == "Quiz:\nName a metal."
    assert dec.part_heading(plan, 1) == "2. "


def test_map_reduce_chunks_cover_the_document():
    doc = "\n\n".join(f"Paragraph {i} " + "word " * 50 for i in range(40))
    chunks = dec.chunk_document(doc, lambda t: len(t.split()), 300)
    assert len(chunks) > 5 and all(len(c.split()) <= 300 for c in chunks)
    assert "\n\n".join(chunks) == doc
    document, question = dec.split_document(doc + "\n\nWhich paragraph mentions word?")
    assert document == doc and question == "Which paragraph mentions word?"
    reduce = dec.reduce_messages([], question, ["NOT FOUND", "Paragraph 3."])
    assert "Paragraph 3." in reduce[-1]["content"] and "Part 2" not in reduce[-1]["content"]
