"""Exact checks that are right by nature, run before the learned verifier.

A learned model can be talked into "close enough"; these cannot. Two questions that name
different numbers, units, dates, identifiers or operators ("==" / "!="), that put a unit
on another number ("100 euros in dollars" / "100 dollars in euros"), that differ in how
many times they say "not", that turn a word into its opposite with a prefix ("lock" /
"unlock", "advantages" / "disadvantages"), that swap which of two things is the source and
which the target ("CSV to JSON" / "JSON to CSV", "fly from Seoul to Singapore" / "from
Singapore to Seoul", "the tenant's duties to the landlord" / "the landlord's ... to the
tenant") or let two things trade places around a verb ("dogs chase cats" / "cats chase
dogs"), or that name two look-alike identifiers ("strlen" / "strlne": no English words, a
letter replaced or two swapped; "Pro+" / "Pro") do not share an answer whatever their
wording. Each check names the clash it found.
Numbers compare by value ("two weeks" = "14 days", "2,000" = "2000"); a unit on one side
only ("7pm" / "seven") is no clash, and neither is a class (dates, units, identifiers) that
only one side names: "in 2 days" / "soon" goes on to the verifier. Two conversations
(`conversation_clash`) pass when their questions pass, their turns name the same numbers
and identifiers, in whatever order, and neither names a thing the other never mentions
while the other names one of its own ("the Starter plan" / "the Business plan").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cache.keys import TURN_SEP
from cache.lexicon import DATE_WORDS, FUNCTION_WORDS, UNITS
from cache.question import Question, edits, entities, is_word, read, stem

CheckReason = Literal["numbers", "units", "dates", "identifiers", "names", "negation",
                      "opposite", "swapped", "lookalike"]
NEGATING_PREFIXES = ("un", "dis", "in", "im", "il", "ir", "non")
TOWARD = frozenset("to into onto towards toward".split())  # the next word is a target
AWAY = frozenset("from off".split())  # the next word is a source
DETERMINERS = frozenset("a an the my your his her their our its this that".split())
SYMMETRIC = frozenset("vs versus".split())  # "A vs B" asks what "B vs A" asks


@dataclass(frozen=True)
class Clash:
    """Why two questions cannot share an answer: the check and what each side said."""

    reason: CheckReason
    cached: tuple[str, ...]
    new: tuple[str, ...]


def _value_and_unit(token: str) -> tuple[str, str]:
    m = re.match(r"(-?[0-9.]+)(.*)", token)
    return (m.group(1), m.group(2)) if m else (token, "")


def _numbers_differ(a: list[str], b: list[str]) -> bool:
    """Unequal lists, where a unit on one side only ("7pm" / "seven") is allowed, but a
    unit both sides name must go with the same values ("15% of 80" / "80% of 15")."""
    if len(a) != len(b):
        return True
    for x, y in zip(a, b, strict=True):
        (vx, ux), (vy, uy) = _value_and_unit(x), _value_and_unit(y)
        if vx != vy or (ux and uy and ux != uy):
            return True
    carried_a, carried_b = _carried(a), _carried(b)
    return any(carried_a[u] != carried_b[u] for u in carried_a.keys() & carried_b.keys())


def _carried(numbers: list[str]) -> dict[str, list[str]]:
    """Each unit -> the values that carry it."""
    out: dict[str, list[str]] = {}
    for n in numbers:
        value, unit = _value_and_unit(n)
        if unit:
            out.setdefault(unit, []).append(value)
    return out


def _named(q: Question, words: frozenset[str]) -> set[str]:
    return {stem(t) for t in q.tokens if t in words}


def _identifiers(q: Question) -> set[str]:
    """Codes mixing letters and digits ("e04", "ipv6", "ba117"), as written, and operators
    ("!=", "==="), and names ending in "+" or "#" ("c++", "c#")."""
    return {t for t in q.tokens if (re.search(r"[a-z]", t) and re.search(r"[0-9]", t)
            and not re.fullmatch(r"-?[0-9.]+(?:st|nd|rd|th|s|am|pm|k|m|x|d|h)?", t))
            or not re.search(r"[a-z0-9]", t) or t[-1] in "+#"}


def _disjoint_sets(a: set[str], b: set[str]) -> bool:
    """Both sides name some, and neither side's set holds the other's."""
    return bool(a and b) and not (a <= b or b <= a)


def _stems(q: Question) -> dict[str, str]:
    """Each content word's stem -> the word as the question reads it."""
    return {stem(t): t for t in q.content}


def _opposite(a: Question, b: Question) -> tuple[str, str] | None:
    """A word on one side that is the other side's word with a negating prefix
    ("unlocked" / "locked", "disadvantages" / "advantages"), each on its own side only."""
    stems_a, stems_b = _stems(a), _stems(b)
    only_a = {s: w for s, w in stems_a.items() if s not in stems_b}
    only_b = {s: w for s, w in stems_b.items() if s not in stems_a}
    for own, other, flip in ((only_a, only_b, False), (only_b, only_a, True)):
        for word in own:
            for prefix in NEGATING_PREFIXES:
                root = word[len(prefix):]
                if word.startswith(prefix) and len(root) >= 3 and root in other:
                    found = (own[word], other[root])
                    return found[::-1] if flip else found
    return None


def _roles(q: Question) -> tuple[dict[str, str], dict[str, str]]:
    """(sources, targets), stem -> word: the word after "from" or "off" is a source, the
    word after "to", "into", "onto" or "towards" a target and the content word right before
    it a source ("CSV to JSON"), as is that word's owner ("the tenant's duties to the
    landlord"); determiners in between are skipped."""
    sources, targets = {}, {}
    for i, token in enumerate(q.tokens):
        if token not in TOWARD and token not in AWAY:
            continue
        j = i + 1
        while j < len(q.tokens) and q.tokens[j] in DETERMINERS:
            j += 1
        if j == len(q.tokens) or q.tokens[j] in FUNCTION_WORDS:
            continue
        (targets if token in TOWARD else sources)[stem(q.tokens[j])] = q.tokens[j]
        if token in TOWARD and i > 0 and q.tokens[i - 1] not in FUNCTION_WORDS:
            sources[stem(q.tokens[i - 1])] = q.tokens[i - 1]
            if i > 2 and q.tokens[i - 2] == "s" and q.tokens[i - 3] not in FUNCTION_WORDS:
                sources[stem(q.tokens[i - 3])] = q.tokens[i - 3]
    return sources, targets


def _swapped(a: Question, b: Question) -> tuple[str, str] | None:
    """Two words both sides name, one a target on one side and a source on the other, the
    second the other way round: "Seoul to Singapore" / "from Singapore to Seoul". Returns
    the target each side names."""
    (sources_a, targets_a), (sources_b, targets_b) = _roles(a), _roles(b)
    for w in sorted(targets_a.keys() & sources_b.keys()):
        for v in sorted(sources_a.keys() & targets_b.keys()):
            if v != w:
                return (targets_a[w], targets_b[v])
    return None


def _transposed(a: Question, b: Question) -> tuple[str, str] | None:
    """The same content words, two of them trading places around a word that stays: "why
    do dogs chase cats" / "why do cats chase dogs", "what does the employer owe the
    employee" / "the employee owe the employer". Next to each other they may be a
    rewording ("how is APR calculated" / "how do I calculate APR"); "vs" joins two
    things either way round."""
    words_a = [w for w in a.content if w not in SYMMETRIC]
    words_b = [w for w in b.content if w not in SYMMETRIC]
    stems_a, stems_b = [stem(w) for w in words_a], [stem(w) for w in words_b]
    if len(stems_a) < 3 or sorted(stems_a) != sorted(stems_b):
        return None
    moved = [i for i, (x, y) in enumerate(zip(stems_a, stems_b, strict=True)) if x != y]
    if len(moved) != 2 or moved[1] - moved[0] < 2:
        return None
    i, j = moved
    return (words_a[i], words_b[i]) if stems_a[i] == stems_b[j] else None


def _lookalike(a: Question, b: Question) -> tuple[str, str] | None:
    """A word on each side, neither an English word nor on the other side, of one length
    and one edit apart (a letter replaced, two swapped): two identifiers ("memcpy" /
    "mecmpy"). A misspelt English word was mended before (cache/typos.py). Or a name with
    a "+" or "#" on one side that the other names without it ("Pro+" / "Pro", "C++" / "C")."""
    words_a, words_b = set(a.content), set(b.content)
    for own, other, flip in ((words_a, words_b, False), (words_b, words_a, True)):
        for word in sorted(own - other):
            if (base := word.rstrip("+#")) != word and base in other:
                return (base, word) if flip else (word, base)
    own_a = [w for w in words_a - words_b if len(w) >= 3 and not is_word(w)]
    own_b = [w for w in words_b - words_a if len(w) >= 3 and not is_word(w)]
    for x in sorted(own_a):
        for y in sorted(own_b):
            if len(x) == len(y) and edits(x, y, 1) <= 1:
                return (x, y)
    return None


def clash(cached: str, new: str) -> Clash | None:
    """The first exact check `new` fails against `cached`, or None when all pass."""
    a, b = read(cached), read(new)
    units_a, units_b = _named(a, UNITS), _named(b, UNITS)  # as written: "f" / "fahrenheit"
    if units_a != units_b and units_a and units_b:
        return Clash("units", tuple(sorted(units_a)), tuple(sorted(units_b)))
    if _numbers_differ(a.numbers, b.numbers):
        return Clash("numbers", tuple(a.numbers), tuple(b.numbers))
    dates_a, dates_b = _named(a, DATE_WORDS), _named(b, DATE_WORDS)
    if _disjoint_sets(dates_a, dates_b):
        return Clash("dates", tuple(sorted(dates_a)), tuple(sorted(dates_b)))
    ids_a, ids_b = _identifiers(a), _identifiers(b)
    if ids_a and ids_b and ids_a != ids_b:
        return Clash("identifiers", tuple(sorted(ids_a)), tuple(sorted(ids_b)))
    if a.negations != b.negations:
        return Clash("negation", (str(a.negations),), (str(b.negations),))
    for reason, check in (("opposite", _opposite), ("swapped", _swapped),
                          ("swapped", _transposed), ("lookalike", _lookalike)):
        if (found := check(a, b)) is not None:
            return Clash(reason, (found[0],), (found[1],))
    return None


def conversation_clash(cached: str, new: str) -> Clash | None:
    """`clash` for two verify texts of `semantic` context (the question, then the earlier
    turns): the questions' checks, then the numbers (by value) and identifiers named
    anywhere in the turns, as sets: a clash when neither side's set holds the other's (a
    user who rewords moves facts between sentences, and small talk may add one); then the
    names (`_names`): a clash when each side names one the other never says."""
    (qa, *ta), (qb, *tb) = cached.split(TURN_SEP), new.split(TURN_SEP)
    if (found := clash(qa, qb)) is not None:
        return found
    a, b = read(" ".join(ta)), read(" ".join(tb))
    if (found := _facts_clash(a, b, dates=False)) is not None:
        return found
    names_a, names_b = _names(qa, ta), _names(qb, tb)
    said_a, said_b = _said((read(qa), a), names_a), _said((read(qb), b), names_b)
    own_a = {n for n in names_a if not _parts(n) <= said_b}
    own_b = {n for n in names_b if not _parts(n) <= said_a}
    if own_a and own_b:
        return Clash("names", tuple(sorted(own_a)), tuple(sorted(own_b)))
    return None


def _facts_clash(a: Question, b: Question, dates: bool) -> Clash | None:
    """The numbers (by value), dates (with `dates`) and identifiers two texts name, as
    sets: a clash when both name some and neither side's set holds the other's."""
    values_a = {_value_and_unit(n)[0] for n in a.numbers}
    values_b = {_value_and_unit(n)[0] for n in b.numbers}
    if _disjoint_sets(values_a, values_b):
        return Clash("numbers", tuple(sorted(values_a)), tuple(sorted(values_b)))
    dates_a, dates_b = (_named(a, DATE_WORDS), _named(b, DATE_WORDS)) if dates else (set(), set())
    if _disjoint_sets(dates_a, dates_b):
        return Clash("dates", tuple(sorted(dates_a)), tuple(sorted(dates_b)))
    ids_a, ids_b = _identifiers(a), _identifiers(b)
    if _disjoint_sets(ids_a, ids_b):
        return Clash("identifiers", tuple(sorted(ids_a)), tuple(sorted(ids_b)))
    return None


def answer_clash(cached: str, fresh: str) -> Clash | None:
    """Two answers to one question disagree on a fact: the numbers, dates or identifiers
    they name (`_facts_clash`); one that names none leaves it to the similarity floor."""
    return _facts_clash(read(cached), read(fresh), dates=True)


def _names(question: str, turns: list[str]) -> set[str]:
    """The names (`entities`: capitalised words not at a sentence start, acronyms) said in
    the question or an earlier turn, each turn read without its "role: " label, days and
    months left to the dates check. A name only one side says is small talk or a detail
    the other left out; a name each side says and the other never does is another plan,
    place or product: the answer may differ."""
    texts = [question, *(turn.split(": ", 1)[-1] for turn in turns)]
    return {name for text in texts for name in entities(text)
            if not _parts(name) <= DATE_WORDS}


def _parts(name: str) -> set[str]:
    """A name's stems: "Flexible-Rate" counts as said where "flexible" and "rate" are."""
    return {stem(part) for part in re.split(r"[-_/.]", name) if part}


def _said(read_as: tuple[Question, ...], names: set[str]) -> set[str]:
    """The stems a conversation says (its question and its turns, as already read), as
    words or inside its names."""
    return {stem(t) for q in read_as for t in q.tokens} | {p for n in names for p in _parts(n)}


def any_clash(cached: str, new: str) -> Clash | None:
    """`conversation_clash` for conversations, `clash` for questions."""
    if TURN_SEP in cached or TURN_SEP in new:
        return conversation_clash(cached, new)
    return clash(cached, new)
