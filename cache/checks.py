"""Exact checks that are right by nature, run before the learned verifier.

A learned model can be talked into "close enough"; these cannot. Two questions that name
different numbers, units, dates or identifiers, or that differ in how many times they say
"not", do not share an answer whatever their wording. Each check names the clash it found.
Numbers compare by value ("two weeks" = "14 days", "2,000" = "2000"); a unit on one side
only ("7pm" / "seven") is no clash, and neither is a class (dates, units, identifiers) that
only one side names: "in 2 days" / "soon" goes on to the verifier. Two conversations
(`conversation_clash`) pass when their questions pass and their turns name the same numbers
and identifiers, in whatever order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cache.keys import TURN_SEP
from cache.lexicon import DATE_WORDS
from cache.question import Question, read, stem

CheckReason = Literal["numbers", "units", "dates", "identifiers", "negation"]
UNITS = frozenset("""kg kilo kilos kilogram kilograms g gram grams mg lb lbs pound pounds oz ounce
    ounces km kilometre kilometres kilometer kilometers mile miles m metre metres meter meters cm
    centimetre centimetres mm inch inches ft foot feet yard yards l litre litres liter liters ml
    gallon gallons pint pints cup cups tablespoon tablespoons teaspoon teaspoons mph kph kmh
    celsius fahrenheit kelvin c f percent gb mb kb tb ghz mhz hz kw kwh w watt watts volt volts
    dollar dollars usd euro euros eur pound sterling gbp yen jpy cents acre acres hectare hectares
    calorie calories kcal joule joules""".split())


@dataclass(frozen=True)
class Clash:
    """Why two questions cannot share an answer: the check and what each side said."""

    reason: CheckReason
    cached: tuple[str, ...]
    new: tuple[str, ...]


def _value_and_unit(token: str) -> tuple[str, str]:
    m = re.match(r"([0-9.]+)(.*)", token)
    return (m.group(1), m.group(2)) if m else (token, "")


def _numbers_differ(a: list[str], b: list[str]) -> bool:
    """Unequal lists, where a unit on one side only ("7pm" / "seven") is allowed."""
    if len(a) != len(b):
        return True
    for x, y in zip(a, b, strict=True):
        (vx, ux), (vy, uy) = _value_and_unit(x), _value_and_unit(y)
        if vx != vy or (ux and uy and ux != uy):
            return True
    return False


def _named(q: Question, words: frozenset[str]) -> set[str]:
    return {stem(t) for t in q.tokens if t in words}


def _identifiers(q: Question) -> set[str]:
    """Codes mixing letters and digits ("e04", "ipv6", "ba117"), as written."""
    return {t for t in q.tokens if re.search(r"[a-z]", t) and re.search(r"[0-9]", t)
            and not re.fullmatch(r"[0-9.]+(?:st|nd|rd|th|s|am|pm|k|m|x|d|h)?", t)}


def _disjoint_sets(a: set[str], b: set[str]) -> bool:
    """Both sides name some, and neither side's set holds the other's."""
    return bool(a and b) and not (a <= b or b <= a)


def clash(cached: str, new: str) -> Clash | None:
    """The first exact check `new` fails against `cached`, or None when all pass."""
    a, b = read(cached), read(new)
    if _numbers_differ(a.numbers, b.numbers):
        return Clash("numbers", tuple(a.numbers), tuple(b.numbers))
    units_a, units_b = _named(a, UNITS), _named(b, UNITS)
    if units_a != units_b and units_a and units_b:
        return Clash("units", tuple(sorted(units_a)), tuple(sorted(units_b)))
    dates_a, dates_b = _named(a, DATE_WORDS), _named(b, DATE_WORDS)
    if _disjoint_sets(dates_a, dates_b):
        return Clash("dates", tuple(sorted(dates_a)), tuple(sorted(dates_b)))
    ids_a, ids_b = _identifiers(a), _identifiers(b)
    if ids_a and ids_b and ids_a != ids_b:
        return Clash("identifiers", tuple(sorted(ids_a)), tuple(sorted(ids_b)))
    if a.negations != b.negations:
        return Clash("negation", (str(a.negations),), (str(b.negations),))
    return None


def conversation_clash(cached: str, new: str) -> Clash | None:
    """`clash` for two verify texts of `semantic` context (the question, then the earlier
    turns): the questions' checks, then the numbers (by value) and identifiers named
    anywhere in the turns, as sets: a clash when neither side's set holds the other's (a
    user who rewords moves facts between sentences, and small talk may add one)."""
    (qa, *ta), (qb, *tb) = cached.split(TURN_SEP), new.split(TURN_SEP)
    if (found := clash(qa, qb)) is not None:
        return found
    a, b = read(" ".join(ta)), read(" ".join(tb))
    values_a = {_value_and_unit(n)[0] for n in a.numbers}
    values_b = {_value_and_unit(n)[0] for n in b.numbers}
    if _disjoint_sets(values_a, values_b):
        return Clash("numbers", tuple(sorted(values_a)), tuple(sorted(values_b)))
    ids_a, ids_b = _identifiers(a), _identifiers(b)
    if _disjoint_sets(ids_a, ids_b):
        return Clash("identifiers", tuple(sorted(ids_a)), tuple(sorted(ids_b)))
    return None


def any_clash(cached: str, new: str) -> Clash | None:
    """`conversation_clash` for conversations, `clash` for questions."""
    if TURN_SEP in cached or TURN_SEP in new:
        return conversation_clash(cached, new)
    return clash(cached, new)
