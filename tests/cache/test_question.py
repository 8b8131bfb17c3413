"""Reading a question: normalised numbers, durations, rewordings and typo'd function words."""

import pytest

from cache.question import is_word, normalize, read


@pytest.mark.parametrize(("text", "numbers"), [
    ("What's the rate on a two-year fix?", ["2"]),
    ("What's the rate on a 2-year fix?", ["2"]),
    ("Can I return it after two weeks?", ["14"]),
    ("Can I return it within a fortnight?", ["14"]),
    ("Can I return it after 14 days?", ["14"]),
    ("Book a table for 2 at 7pm", ["2", "7pm"]),
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
