"""engine/json_constraint.py: which byte strings can begin a JSON object, and the token
rule built on it (a hand-made vocabulary, so every decision is visible)."""

from __future__ import annotations

import json

import pytest
import torch

from engine.json_constraint import MAX_BLANK_RUN, JsonConstraint, JsonPrefix
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

VALID = [
    b'{}', b' {"a": 1}', b'{"a": [1, -2.5e+3, 0, true, false, null, "x"], "b": {"c": []}}',
    b'{"s": "quote \\" slash \\\\ unicode \\u00e9 caf\xc3\xa9"}', b'{"n": -0.5E-7}',
    b'{\n  "deep": [[{"x": [{}]}]]\n}',
]


@pytest.mark.parametrize("doc", VALID)
def test_valid_objects_are_accepted_byte_by_byte_and_complete_at_the_end(doc):
    assert isinstance(json.loads(doc), dict)
    prefix = JsonPrefix()
    for i, b in enumerate(doc):
        assert not prefix.complete
        assert prefix.feed(b), doc[: i + 1]
    assert prefix.complete


@pytest.mark.parametrize(("doc", "bad_at"), [
    (b'[1]', 0),  # JSON mode answers an object
    (b'"x"', 0),
    (b'{"a" 1}', 5),  # a colon must follow a key
    (b'{"a": 01}', 7),  # no leading zeros
    (b'{"a": 1.}', 8),  # a fraction needs digits
    (b'{"a": tru}', 9),
    (b'{"a": "x\x01"}', 8),  # control characters must be escaped
    (b'{"a": "\\q"}', 8),
    (b'{"a": "\\u12g4"}', 11),
    (b'{"a": 1,}', 8),  # no trailing comma
    (b'{"a": [1}', 8),  # brackets close in order
    (b'{} {}', 2),  # nothing after the object, not even a blank
    (b'{1: 2}', 1),  # keys are strings
])
def test_invalid_prefixes_are_refused_at_the_first_bad_byte(doc, bad_at):
    prefix = JsonPrefix()
    for b in doc[:bad_at]:
        assert prefix.feed(b)
    assert not prefix.feed(doc[bad_at])


def test_a_run_of_blanks_is_cut_off():
    prefix = JsonPrefix()
    assert prefix.feed_all(b"{" + b" " * MAX_BLANK_RUN)
    assert not prefix.feed(ord(" "))
    inside = JsonPrefix()  # blanks inside strings are text, not layout
    assert inside.feed_all(b'{"a": "' + b" " * 100 + b'"}') and inside.complete


def test_copies_are_independent():
    prefix = JsonPrefix()
    prefix.feed_all(b'{"a": [')
    trial = prefix.copy()
    assert trial.feed_all(b"1]}") and trial.complete
    assert not prefix.complete and prefix.feed_all(b'"x"]}')


# a vocabulary of 7 tokens: 0 is the end of text, 6 a special token (no text)
VOCAB: list[bytes | None] = [None, b'{"', b'a":', b" 1", b"}", b"hello", None]
EOS = [0]


def test_the_rule_allows_what_can_follow_and_the_end_only_after_the_object():
    rule = JsonConstraint(VOCAB, EOS)
    assert [t for t in range(7) if rule.allows(t)] == [1]
    for token in (1, 2, 3):
        rule.advance(token)
    assert [t for t in range(7) if rule.allows(t)] == [4]  # only "}" closes `{"a": 1`
    assert rule.first_allowed([5, 0, 6, 4, 1]) == 4
    assert rule.first_allowed([5, 0, 6]) is None
    rule.advance(4)
    assert rule.complete and [t for t in range(7) if rule.allows(t)] == [0]
    assert rule.first_allowed([5, 4, 1]) == 0  # closed: the answer ends


def test_the_sampler_replaces_a_refused_pick_with_the_best_allowed():
    logits = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0, 9.0, 8.0]] * 2)  # "hello" is likeliest
    seqs = [Sequence("greedy", [0], SamplingParams(temperature=0)),
            Sequence("free", [0], SamplingParams(temperature=0))]
    seqs[0].constraint = JsonConstraint(VOCAB, EOS)
    assert Sampler(torch.device("cpu"))(logits, seqs) == [1, 5]
    sampled = Sequence("sampled", [0], SamplingParams(temperature=1.0, seed=3))
    sampled.constraint = JsonConstraint(VOCAB, EOS)
    assert Sampler(torch.device("cpu"))(logits[:1], [sampled]) == [1]  # the only token allowed
