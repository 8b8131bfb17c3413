"""Reading a question for the guard: normalised tokens, content words, numbers, entities.

Normalising first lets the guard compare what a question asks rather than how it is typed:
politeness and filler phrases go, contractions open up, generic rewordings ("what's the
price of" -> "how much is") take one form, "2,000" reads as 2000, "wi-fi" as "wifi", a
number joined to a word by a hyphen stands alone ("two-year" -> "two year"), and a duration
in weeks reads in days ("two weeks" -> "14 days"), so numbers and units compare by value.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from wordnet_lookup import is_wordnet_term
from wordnet_lookup.find_wordnet import _hash_exists  # exact lookup (pinned 1.3.4)

from cache.keys import TURN_SEP
from cache.lexicon import (
    CODE_WORDS,
    CONTRACTIONS,
    FILLER_PHRASES,
    FILLERS,
    FUNCTION_WORDS,
    NEGATORS,
    NUMBER_WORDS,
    REWRITES,
    UNIT,
)

# A word (with a "+" or "#" glued to its end: "c++", "pro+", "c#"), a number (signed where
# the minus stands apart: "-144", not the range "2-3"), or a comparison operator standing
# alone ("==", "!==", "&&").
TOKEN = re.compile(r"[a-z]+[0-9]*[a-z0-9]*(?:\++|#)?(?![a-z0-9])"
                   r"|(?:(?<![a-z0-9.])-)?[0-9]+(?:\.[0-9]+)?[a-z]*"
                   r"|(?<![^\s'\"`(])(?:[!=<>]*=[!=<>]*|&&|\|\||<<|>>|->|=>)(?![^\s'\"`),.?;:])")
_ENTITY = re.compile(r"\b(?:[A-Z][a-zA-Z0-9'&.-]*|[a-zA-Z]*[0-9][a-zA-Z0-9]*)\b")
_FILLER_PHRASE = re.compile(r"\b(?:" + "|".join(FILLER_PHRASES) + r")\b")
_REWRITES = [(re.compile(pattern), repl) for pattern, repl in REWRITES]
ORDINALS = frozenset("second third fourth fifth sixth seventh eighth ninth tenth".split())
_CARDINAL = "|".join(sorted((w for w in NUMBER_WORDS if w not in ORDINALS), key=len,
                            reverse=True))
_NUMBER = rf"(?:[0-9]+(?:\.[0-9]+)?|{_CARDINAL})"
_NUMBER_HYPHEN = re.compile(rf"\b({_NUMBER})-(?=[a-z])")
_WEEKS = re.compile(rf"\b({_NUMBER}) weeks?\b")
_FORTNIGHT = re.compile(r"\bfortnight\b")


@lru_cache(maxsize=65536)
def is_word(word: str) -> bool:
    """An English word (WordNet's 88k lemmas, their plurals, a function word, or a word of
    code such as "int"). Checked exactly first: "acess" is not read as the plural of "ace"."""
    if word in FUNCTION_WORDS or word in CODE_WORDS or _hash_exists(word):
        return True
    return word.endswith("s") and not word.endswith("ss") and is_wordnet_term(word)


def edits(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein distance (adjacent swaps count once), stopped past `limit`."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


_SHORT_FUNCTION_WORDS = sorted(w for w in FUNCTION_WORDS if len(w) >= 3)


@lru_cache(maxsize=65536)
def _function_word_typo(token: str) -> str:
    """"hwo" -> "how", "teh" -> "the": a short non-word one edit away from a function word."""
    if len(token) > 6 or token in FUNCTION_WORDS or is_word(token) or not token.isalpha():
        return token
    for fw in _SHORT_FUNCTION_WORDS:
        if abs(len(fw) - len(token)) <= 1 and edits(token, fw, 1) <= 1:
            return fw
    return token


@dataclass
class Question:
    """A question read once: its tokens, content words, numbers, entities, negations."""

    text: str
    tokens: list[str]
    content: list[str]
    numbers: list[str]
    entities: set[str]
    negations: int


def _value(word: str) -> float:
    return float(NUMBER_WORDS[word]) if word in NUMBER_WORDS else float(word)


def normalize(text: str) -> str:
    t = text.replace("\u2019", "'").replace("\u2018", "'").lower()
    t = _FILLER_PHRASE.sub(" ", t)
    for k, v in CONTRACTIONS.items():
        t = t.replace(k, v)
    for pattern, repl in _REWRITES:
        t = pattern.sub(repl, t)
    t = re.sub(r"(?<=\d),(?=\d{3})", "", t)  # 2,000 -> 2000
    t = re.sub(r"(?<=\d)\s*%", " percent", t)  # 15% -> 15 percent
    t = re.sub(r"(?<=[a-z])\s+\+(?=[\s?.!,]|$)", "+", t)  # disney + -> disney+
    t = _NUMBER_HYPHEN.sub(r"\1 ", t)  # two-year -> two year, 5-star -> 5 star
    t = _FORTNIGHT.sub("14 days", t)
    t = _WEEKS.sub(lambda m: f"{_value(m.group(1)) * 7:g} days", t)
    t = re.sub(r"(?<=[a-z])-(?=[a-z])", "", t)  # wi-fi -> wifi, e-mail -> email
    return t


_FILLER_WORD = rf"\b(?:{'|'.join(sorted(FILLERS))})\b(?=\s*(?:[,!.:;?]|$))"  # "um," not "well water"
_GREETING = rf"(?:\b(?:{'|'.join(FILLER_PHRASES)})\b|{_FILLER_WORD}|:-?\))"
_LEADING_FILLER = re.compile(rf"^(?:\s*{_GREETING}[\s,.!:;?-]*)+", re.IGNORECASE)
_TRAILING_FILLER = re.compile(rf"(?<=[?.!])(?:[\s,.!:;-]*{_GREETING}[\s,.!?]*)+$",
                              re.IGNORECASE)


def without_fillers(text: str) -> str:
    """`text` without the greetings, thanks and fillers before and after the question ("hey
    there! what is X? any idea?" -> "what is X?"), otherwise as written: what the pair
    verifier reads, since a filler on one side tells it nothing about the answer."""
    bare = _TRAILING_FILLER.sub("", _LEADING_FILLER.sub("", text)).strip()
    return bare or text


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude suffix stripper: enough to match 'cancelled'/'cancel', 'accounts'/'account'."""
    for suffix in ("ations", "ation", "ings", "ing", "edly", "ied", "ies", "ed", "es", "s",
                   "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2]:  # cancell -> cancel
        word = word[:-1]
    return word


def number(token: str) -> str | None:
    """The value of a number token ("two" -> "2", "7pm" -> "7pm", "3rd" -> "3"), else None."""
    if token in NUMBER_WORDS:
        return f"{NUMBER_WORDS[token]:g}"
    m = re.match(r"^(-?[0-9]+(?:\.[0-9]+)?)([a-z]*)$", token)
    if m:
        unit = m.group(2)
        unit = "" if unit in ("st", "nd", "rd", "th", "s") else UNIT.get(unit, unit)
        return f"{float(m.group(1)):g}{unit}"
    return None


def entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start, acronyms, words with digits."""
    out: set[str] = set()
    for sentence in re.split(r"(?<=[.?!])\s+", text.strip()):
        for i, m in enumerate(_ENTITY.finditer(sentence)):
            word = m.group(0).strip(".'").removesuffix("'s")
            low = word.lower()
            if "'" in word or not word or number(low) is not None or low in FUNCTION_WORDS \
                    or low in FILLERS:
                continue
            if word == "I" or (i == 0 and m.start() == 0 and not word[1:].isupper()
                               and not any(c.isdigit() for c in word)):
                continue
            out.add(low)
    return out


def _numbers(tokens: list[str]) -> list[str]:
    """The value of each number token, with the unit the next token names when it has none
    of its own: "100 euros" -> "100eur", so "100 euros" / "100 dollars" differ."""
    out = []
    for i, token in enumerate(tokens):
        if (value := number(token)) is None:
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        out.append(value + UNIT[after] if value[-1].isdigit() and after in UNIT else value)
    return out


@lru_cache(maxsize=4096)
def read(text: str) -> Question:
    names = entities(text)
    tokens = [t if t in names else _function_word_typo(t) for t in TOKEN.findall(normalize(text))]
    while tokens and tokens[0] in FILLERS:
        tokens.pop(0)
    while tokens and tokens[-1] in FILLERS:
        tokens.pop()
    numbers = sorted(_numbers(tokens))
    content = [t for t in tokens if t not in FUNCTION_WORDS and t not in FILLERS
               and t not in NEGATORS and number(t) is None]
    return Question(text=text, tokens=tokens, content=content, numbers=numbers,
                    entities=names, negations=sum(t in NEGATORS for t in tokens))


def normal_form(text: str) -> str:
    """What two texts must share to read the same once normalised: each turn's tokens (the
    guard's `same_text`)."""
    return TURN_SEP.join(" ".join(read(turn).tokens) for turn in text.split(TURN_SEP))


def form_key(text: str) -> int:
    """`normal_form(text)` as a 63-bit number, the same in every process: the semantic index
    files entries by it, so a repeat that reads the same is found without an embedding."""
    digest = hashlib.blake2b(normal_form(text).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def key_words(text: str) -> frozenset[str]:
    """The stems of a question's content words and the values of its numbers: what the
    semantic index files an entry by, so a question that shares most of them is read by
    the verifier before any embedding (`VectorIndex.lexical`)."""
    q = read(text)
    return frozenset(stem(w) for w in q.content) | frozenset(q.numbers)
