"""Word-level relations the guard needs: opposites, and when a word of one question is
matched in another (same stem, word family, synonym, typo, split or joined compound,
acronym spelled out).

A matched word means "the other question says this too"; an opposite means "the other
question says the reverse". Both come from general English, never fitted to an evaluation
set: hand-written lists (cache/lexicon.py), a few rules, and WordNet's synonyms and antonyms
in a word's most frequent senses (cache/word_senses.py).
"""

from __future__ import annotations

import re
from functools import lru_cache

from cache.lexicon import ENTITY_ALIASES, antonym_map, synonym_map
from cache.question import Question, edits, is_word, stem
from cache.word_senses import opposed, same_meaning

ANTONYMS = antonym_map()
SYNONYMS = synonym_map()
NEGATING_PREFIXES = ("non", "un", "dis", "in", "im", "ir", "il", "de", "anti")


def _stem_antonyms() -> dict[str, set[str]]:
    """The antonym map over stems, so "increased"/"decreased" reads as "increase"/"decrease"."""
    out: dict[str, set[str]] = {}
    for word, opposites in ANTONYMS.items():
        out.setdefault(stem(word), set()).update(stem(x) for x in opposites)
    return out


STEM_ANTONYMS = _stem_antonyms()


def spelling_variant(a: str, b: str) -> bool:
    """British / American spellings of one word: centre/center, colour/color,
    organise/organize, travelled/traveled, catalogue/catalog, licence/license."""
    if a == b or min(len(a), len(b)) < 5:
        return False
    for x, y in ((a, b), (b, a)):
        for br, us in (("re", "er"), ("res", "ers"), ("our", "or"), ("ours", "ors"),
                       ("ogue", "og"), ("ence", "ense")):
            if x.endswith(br) and y == x[: -len(br)] + us:
                return True
        for br, us in (("our", "or"), ("is", "iz"), ("ys", "yz"), ("ll", "l")):
            i = x.find(br, 2)
            if i > 0 and x[:i] + us + x[i + len(br):] == y and len(x) - i - len(br) >= 1:
                return True  # colourful/colorful, organising/organizing, travelled/traveled
    return False


@lru_cache(maxsize=65536)
def typo(a: str, b: str, max_edits: int = 2, min_len: int = 3) -> bool:
    """A slip of the keyboard, never between two English words ("diary"/"dairy"): one edit,
    two in words of 8+ letters; in words under 5 letters one edit only from a non-word to a
    word ("bok"/"book"), so two unknown names ("Aldi"/"Audi") never match."""
    if a == b or min(len(a), len(b)) < min_len:
        return False
    if spelling_variant(a, b):
        return True
    known_a, known_b = is_word(a), is_word(b)
    if known_a and known_b:
        return False
    if min(len(a), len(b)) < 5 and known_a == known_b:
        return False
    limit = min(max_edits, 2 if min(len(a), len(b)) >= 8 else 1)
    return abs(len(a) - len(b)) <= limit and edits(a, b, limit) <= limit


@lru_cache(maxsize=65536)
def opposite(a: str, b: str) -> bool:
    if b in ANTONYMS.get(a, ()) or stem(b) in STEM_ANTONYMS.get(stem(a), ()):
        return True
    for x, y in ((a, b), (b, a)):
        if len(y) >= 4 and len(x) > len(y) and x.endswith(y) \
                and x[: len(x) - len(y)].rstrip("-") in NEGATING_PREFIXES:
            return True
    for x, y in ((a, b), (b, a)):
        if x.startswith("in") and y.startswith("ex") and x[2:] == y[2:]:
            return True  # internal/external, inbound/exbound
        if len(y) >= 4 and x == "ex" + y and not is_word(x):
            return True  # ex-partner (read "expartner") is not the partner
    return opposed(a, b)


def same_family(a: str, b: str) -> bool:
    """connect/connection, withdraw/withdrawal: one stem extends the other by a suffix."""
    short, long_ = sorted((stem(a), stem(b)), key=len)
    return len(short) >= 5 and long_.startswith(short) and len(long_) - len(short) <= 4


def synonyms(word: str) -> set[str]:
    return SYNONYMS.get(word, set()) | SYNONYMS.get(stem(word), set())


def aliases(entity: str) -> set[str]:
    """Other names of a named entity ("us" -> "usa", "america")."""
    return ENTITY_ALIASES.get(entity, set())


def acronyms(q: Question) -> set[str]:
    """Words written in capitals in the raw text ("PAC", "ISA"), lower-cased."""
    return {m.lower() for m in re.findall(r"\b[A-Z]{2,5}\b", q.text)}


def _runs(tokens: list[str], acronym: str) -> list[list[str]]:
    """Runs of consecutive tokens whose initials spell `acronym`."""
    n = len(acronym)
    return [tokens[i:i + n] for i in range(len(tokens) - n + 1)
            if "".join(w[0] for w in tokens[i:i + n]) == acronym]


def spelled_out(acronym: str, tokens: list[str]) -> bool:
    """`tokens` hold a run whose initials spell `acronym` ("pac": "porting authorisation
    code")."""
    return 2 <= len(acronym) <= 5 and acronym.isalpha() and bool(_runs(tokens, acronym))


def covered(q: Question, other: Question) -> set[str]:
    """Words of `q` that `other` writes another way: "log in" / "login" (a compound split or
    joined), "porting authorisation code" / "PAC" (an acronym spelled out) and "call off" /
    "cancel" (a two-word WordNet lemma sharing a frequent sense with a word)."""
    out: set[str] = set()
    toks, others = q.tokens, set(other.tokens)
    for x, y in zip(toks, toks[1:], strict=False):
        if x + y in others:
            out.update((x, y))
    for t in toks:
        if any(len(o) >= 3 and t != o and t.startswith(o) and t[len(o):] in others
               for o in others):
            out.add(t)  # "checkout" vs "check out"
    for acronym in acronyms(other):
        for run in _runs(toks, acronym):
            out.update(run)
    out.update(a for a in acronyms(q) if _runs(other.tokens, a))
    theirs, mine = _swapped_in(other, q), _swapped_in(q, other)
    for x, y in zip(toks, toks[1:], strict=False):  # "call off" / "cancel"
        if any(same_meaning(f"{x}_{y}", w) for w in theirs):
            out.update((x, y))
    their_lemmas = [f"{x}_{y}" for x, y in zip(other.tokens, other.tokens[1:], strict=False)]
    out.update(w for w in mine if any(same_meaning(lemma, w) for lemma in their_lemmas))
    return out


def matched(word: str, other: Question, fuzzy: bool, extra: set[str],
            swapped_in: list[str]) -> bool:
    """Whether `other` says `word` too (`extra`: words already known to be covered).
    `swapped_in`: the words of `other` that `word`'s side does not say itself, the only ones
    a WordNet synonym may pair with: "account" said on both sides cannot also stand for
    "history" (WordNet's first sense of "account") on one of them."""
    if word in extra:
        return True
    s = stem(word)
    syns = {stem(x) for x in synonyms(word)}
    for w in other.content:
        if w == word or stem(w) == s or same_family(w, word):
            return True
    if fuzzy and any(typo(w, word) for w in other.tokens):
        return True
    if any(w in syns or stem(w) in syns for w in other.tokens):
        return True
    return any(same_meaning(word, w) for w in swapped_in)


def _swapped_in(q: Question, other: Question) -> list[str]:
    """Content words of `q` that `other` does not say by the same stem."""
    own = {stem(w) for w in other.content}
    return [w for w in q.content if stem(w) not in own]


def unmatched(a: Question, b: Question, fuzzy: bool,
              known: frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """The content words of each side that the other side does not say (sorted, unique);
    `known`: words already judged to be said on both sides."""
    cov_a, cov_b = covered(a, b) | known, covered(b, a) | known
    in_b, in_a = _swapped_in(b, a), _swapped_in(a, b)
    miss_a = sorted({w for w in a.content if not matched(w, b, fuzzy, cov_a, in_b)})
    miss_b = sorted({w for w in b.content if not matched(w, a, fuzzy, cov_b, in_a)})
    return miss_a, miss_b
