"""Reading a question: normalised numbers, durations, rewordings and typo'd function words."""

import pytest

from cache.question import is_word, normalize, read, without_fillers


@pytest.mark.parametrize(("text", "numbers"), [
    ("What's the rate on a two-year fix?", ["2"]),
    ("What's the rate on a 2-year fix?", ["2"]),
    ("Can I return it after two weeks?", ["14"]),
    ("Can I return it within a fortnight?", ["14"]),
    ("Can I return it after 14 days?", ["14"]),
    ("Book a table for 2 at 7pm", ["2", "7pm"]),
    ("How many dollars is 100 euros?", ["100eur"]),  # the unit after a number is its own
    ("What is 15% of 80?", ["15percent", "80"]),
    ("Convert -40 degrees, 2-3 times", ["-40", "2", "3"]),  # a sign, not a range's dash
])
def test_numbers_compare_by_value(text, numbers):
    assert read(text).numbers == numbers


def test_durations_read_in_days_and_frequencies_take_one_form():
    assert "days" in read("after three weeks").tokens
    assert read("£10 a month").tokens == read("£10 monthly").tokens
    assert read("paid yearly").tokens == read("paid annually").tokens


@pytest.mark.parametrize(("a", "b"), [
    ("How do I turn on notifications?", "How do I enable notifications?"),
    ("How do I log in to the app?", "How do I sign in to the app?"),
    ("How much does delivery cost?", "How much is delivery?"),
    ("When are you open?", "What are your opening hours?"),
    ("Can I send it back?", "Can I return it?"),
])
def test_generic_rewordings_read_alike(a, b):
    assert read(a).content == read(b).content


def test_typod_function_words_are_read_as_meant():
    assert read("hwo do i reset teh password").tokens[:2] == ["how", "do"]
    assert "the" in read("hwo do i reset teh password").tokens
    assert read("Is my ISA open?").tokens == ["is", "my", "isa", "open"]  # names stay


def test_dictionary_words_and_non_words():
    assert is_word("address") and is_word("accounts") and is_word("the")
    assert not is_word("adress") and not is_word("acess") and not is_word("bnak")


def test_normalize_keeps_joined_words_and_thousands():
    assert normalize("Wi-Fi for 2,000 users") == "wifi for 2000 users"


def test_symbols_that_name_things_are_tokens():
    assert read("C++ or C#: which is faster?").tokens[:3] == ["c++", "or", "c#"]
    assert read("Is the Dustral V8 Pro+ quiet?").content == ["dustral", "v8", "pro+", "quiet"]
    assert "!==" in read("What does !== do in JS?").tokens
    assert read("bleach+vinegar safe?").tokens == ["bleach", "vinegar", "safe"]
    assert is_word("int")  # a C type, not a typo of "into"


@pytest.mark.parametrize(("text", "bare"), [
    ("hey there! how thick is the MacBook Air? any idea?", "how thick is the MacBook Air?"),
    ("sorry to bother you, but is it open? thanks in advance", "is it open?"),
    ("um, which stocks went down today? :)", "which stocks went down today?"),
    ("Well water: is it safe?", "Well water: is it safe?"),  # no comma: not a filler
    ("thanks", "thanks"),  # nothing left: kept as written
])
def test_greetings_and_thanks_around_a_question_go(text, bare):
    assert without_fillers(text) == bare
