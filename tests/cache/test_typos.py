"""Typo mending (cache/typos.py): a misspelt word takes the spelling of the one English word
one edit away on the other side; identifiers, names and real words stay as written."""

import pytest

from cache.guard import Guard
from cache.typos import mend_typos


@pytest.mark.parametrize(("cached", "new", "mended"), [
    # a letter dropped, doubled, replaced, two swapped; on either side
    ("How do I soften brown sugar?", "How do I sftn brown sugar?", None),
    ("How do I soften brown sugar?", "How do I sofen brown sugar?",
     ("How do I soften brown sugar?", "How do I soften brown sugar?")),
    ("What's the montthly payment?", "What's the monthly payment?",
     ("What's the monthly payment?", "What's the monthly payment?")),
    ("Can I retrun it to a shop?", "Can I return it to a store?",
     ("Can I return it to a shop?", "Can I return it to a store?")),
    ("Reset my pasword", "reset my password",
     ("Reset my password", "reset my password")),
    ("Is the Museum open?", "is the Musuem open?",
     ("Is the Museum open?", "is the Museum open?")),
    ("Why did the Roman Empire fall?", "Why did the Roman Empirre fall?",  # a slip in a name
     ("Why did the Roman Empire fall?", "Why did the Roman Empire fall?")),
    # a word split in two
    ("Is rice left out over night safe?", "Is rice left out overnight safe?",
     ("Is rice left out overnight safe?", "Is rice left out overnight safe?")),
])
def test_a_misspelt_word_takes_the_other_sides_spelling(cached, new, mended):
    assert mend_typos(cached, new) == (mended or (cached, new))


@pytest.mark.parametrize(("cached", "new"), [
    ("How do I use Python's str.strip?", "How do I use Python's str.lstrip?"),  # code
    ("Is the XR200 waterproof?", "Is the XR2OO waterproof?"),  # digits
    ("Set up iCloud on a Mac", "Set up iClowd on a Mac"),  # inner capital
    ("How does a lithium-ion battery work?", "How does a lithium-iom battery work?"),
    ("What is NASA's budget?", "What is NASSA's budget?"),  # capitals
    ("How do I bake bread?", "How do I make bread?"),  # two English words
    ("Zorvex pricing", "Zorvax pricing"),  # no English word on either side
    ("Do you sell bats or cats?", "Do you sell bat or cats?"),  # "bat" is a word
    ("Compare the rate and the race", "Compare the rate and the rave"),  # all words
    ("Is the Pelago Trek covered?", "Is the Pelago Trak covered?"),  # a letter replaced in a name
])
def test_identifiers_names_and_real_words_stay_as_written(cached, new):
    assert mend_typos(cached, new) == (cached, new)


def test_a_word_one_edit_from_two_candidates_is_left_alone():
    # "cart" and "card" are both one edit from "carx": no way to tell which was meant
    assert mend_typos("Can I pay by card at the cart?", "Can I pay by carx?") == \
        ("Can I pay by card at the cart?", "Can I pay by carx?")


def test_the_guard_serves_a_typo_as_the_same_text_and_keeps_look_alike_code_apart():
    guard = Guard()
    verdict = guard.check("How do I soften brown sugar that has gone hard?",
                          "how do i sofetn brown sugar that has gone hard")
    assert (verdict.ok, verdict.reason) == (True, "same_text")
    verdict = guard.check("How do I use Python's str.strip method?",
                          "How do I use Python's str.lstrip method?")
    assert verdict.reason in ("verified", "verifier")  # read by the model, not waved through
