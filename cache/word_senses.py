"""General word knowledge for the guard, from WordNet (cache/wordnet.py): which words say the
same thing and which say the reverse.

Polysemy is the false-hit risk ("charge" the fee / the battery / the accusation), so a word
only lends the meanings of its most frequent senses (WordNet orders a lemma's senses by
corpus frequency): `TOP_SENSES` a part of speech. Relations kept:
  same meaning: the synset's other lemmas, an adjective's similar-to cluster ("chilly" ~
      "cold"), a verb's verb group, the word's own derivational forms ("delay"/"delayed");
  opposite: WordNet's antonym pointers from the word itself (lexical, so "good" opposes "bad"
      but not every lemma of "bad"'s synset), in its top senses.
A broader word (hypernym) is no match: on the train split's unmatched words it paired none.
Only single words are returned (a two-word lemma such as "call_off" may be asked about);
all answers are memoised.
"""

from __future__ import annotations

from functools import lru_cache

from cache.wordnet import POSES, Synset, WordNet, shared

TOP_SENSES = {"n": 2, "v": 2, "a": 2, "r": 1}
SAME = frozenset("&$")  # similar-to (adjectives), verb group
DERIVED = "+"
ANTONYM = "!"


def _single(words: tuple[str, ...]) -> set[str]:
    return {w for w in words if "_" not in w and "-" not in w and w.isalpha()}


def _top(wn: WordNet, word: str) -> list[tuple[int, Synset]]:
    """(1-based word number, synset) for the top senses of each base form of `word`."""
    out = []
    for pos in POSES:
        for base in wn.base_forms(word, pos):
            for offset in wn.senses(base, pos)[:TOP_SENSES[pos]]:
                syn = wn.synset(offset, pos)
                if base in syn.words:
                    out.append((syn.words.index(base) + 1, syn))
    return out


def _targets(wn: WordNet, syn: Synset, number: int, symbols: frozenset[str] | str,
             lexical_only: bool = False) -> set[str]:
    """Words that `syn`'s pointers with these symbols reach from word `number` (a lexical
    pointer) or from the whole synset (a semantic one, unless `lexical_only`)."""
    out: set[str] = set()
    for p in syn.pointers:
        if p.symbol not in symbols:
            continue
        if p.source and p.source == number:
            out |= _single((wn.synset(p.offset, p.pos).words[p.target - 1],))
        elif p.source == 0 and not lexical_only:
            out |= _single(wn.synset(p.offset, p.pos).words)
    return out


@lru_cache(maxsize=65536)
def meanings(word: str) -> frozenset[str]:
    """Single words that say what `word` says in one of its most frequent senses."""
    wn = shared()
    if wn is None or not word.replace("_", "").isalpha():
        return frozenset()
    out: set[str] = set()
    for number, syn in _top(wn, word):
        out |= _single(syn.words)
        out |= _targets(wn, syn, number, SAME)
        out |= _targets(wn, syn, number, DERIVED, lexical_only=True)
    out.discard(word)
    return frozenset(out)


@lru_cache(maxsize=65536)
def opposites(word: str) -> frozenset[str]:
    """Single-word antonyms of `word` in its most frequent senses."""
    wn = shared()
    if wn is None or not word.isalpha():
        return frozenset()
    out: set[str] = set()
    for number, syn in _top(wn, word):
        out |= _targets(wn, syn, number, ANTONYM, lexical_only=True)
    return frozenset(out)


@lru_cache(maxsize=65536)
def _forms(word: str) -> frozenset[str]:
    wn = shared()
    if wn is None:
        return frozenset({word})
    return frozenset({word, *(b for pos in POSES for b in wn.base_forms(word, pos))})


@lru_cache(maxsize=65536)
def same_meaning(a: str, b: str) -> bool:
    """`a` and `b` (any inflection) share a frequent sense, or one is the other's similar
    word, verb-group member or derivational form."""
    return bool(_forms(b) & meanings(a)) or bool(_forms(a) & meanings(b))


@lru_cache(maxsize=65536)
def opposed(a: str, b: str) -> bool:
    """WordNet lists `a` and `b` (any inflection) as antonyms in a frequent sense."""
    return bool(_forms(b) & opposites(a)) or bool(_forms(a) & opposites(b))

