"""Word relations: typos only where one side is not a word, spelling variants, opposites,
compounds and acronyms."""

import pytest

from cache.question import read
from cache.wording import covered, opposite, spelling_variant, typo, unmatched


@pytest.mark.parametrize(("a", "b"), [
    ("address", "adress"), ("prescription", "perscription"), ("bank", "bnak"),
    ("book", "bok"), ("colour", "color"), ("centre", "center"), ("organise", "organize"),
])
def test_slips_and_spellings_match(a, b):
    assert typo(a, b)


@pytest.mark.parametrize(("a", "b"), [
    ("diary", "dairy"), ("flash", "flush"), ("debit", "debt"), ("three", "there"),
    ("shoe", "she"), ("four", "for"),
])
def test_two_real_words_are_never_a_typo(a, b):
    assert not typo(a, b)


def test_short_unknown_names_are_not_typos_of_each_other():
    assert not typo("aldi", "audi")


def test_spelling_variants_need_the_pattern_at_the_right_place():
    assert spelling_variant("travelled", "traveled") and spelling_variant("licence", "license")
    assert not spelling_variant("three", "there")


def test_opposites():
    assert opposite("fulltime", "parttime") and opposite("refundable", "nonrefundable")
    assert not opposite("refund", "return")


def test_compounds_and_acronyms_are_covered():
    assert {"voice", "mail"} <= covered(read("Set up voice mail"), read("Set up voicemail"))
    pac, spelled = read("Get a PAC code"), read("Get a porting authorisation code")
    assert {"porting", "authorisation"} <= covered(spelled, pac)
    assert "pac" in covered(pac, spelled)
    assert unmatched(pac, spelled, True) == ([], [])


def test_known_pairs_count_as_matched():
    a, b = read("What is the easiest way"), read("What is the simplest way")
    assert unmatched(a, b, True) == (["easiest"], ["simplest"])
    assert unmatched(a, b, True, frozenset({"easiest", "simplest"})) == ([], [])


def test_wordnet_synonyms_match_only_a_word_the_other_side_swapped_in():
    # "purchase"/"buy" are one WordNet synset (no hand-written group has them)
    assert unmatched(read("How do I purchase a ticket?"), read("How do I buy a ticket?"),
                     True) == ([], [])
    # "account" is said on both sides, so it cannot also stand for "history" (WordNet's first
    # sense of "account" is a narrative)
    assert unmatched(read("How do I delete my account?"),
                     read("How do I delete my account history?"), True) == ([], ["history"])


def test_a_two_word_wordnet_lemma_covers_its_single_word_synonym():
    a, b = read("How do I cancel my membership?"), read("How do I call off my membership?")
    assert {"call", "off"} <= covered(b, a) and "cancel" in covered(a, b)
    assert unmatched(a, b, True) == ([], [])


def test_wordnet_antonyms_and_the_ex_prefix_are_opposites():
    assert opposite("inflate", "deflate") and opposite("accepted", "refused")
    assert opposite("partner", "expartner") and opposite("expartner", "partner")
    assert not opposite("port", "export")  # "export" is a word of its own, not ex-"port"
    assert not opposite("buy", "purchase")
