"""The guard: decides whether a cached question's answer also answers a new question.

Cosine similarity alone cannot: "cancel my subscription" / "do NOT cancel my subscription"
score 0.97+, above many true paraphrases. A candidate must first agree with the new
question on everything that flips an answer: numbers, dates, named entities and their
order, negation, antonyms ("open"/"closed", "lock"/"unlock", "included"/"excluded"), and
which preposition governs which word ("from savings to current"). Then either
  (a) every content word of each side is matched in the other (same stem, word family,
      synonym, or a typo): the same question with fillers, typos or function words changed,
      served at a low similarity floor; or
  (b) the two are worded differently throughout (token overlap under `reword_overlap`, and
      not a single short span swapped) and the similarity reaches the route's threshold,
      lowered by `few_unmatched_relief` when at most `few_unmatched` content words a side
      are left unmatched: a reworded paraphrase.
Questions are normalised first (politeness, filler phrases, generic rewordings such as
"what's the price of" -> "how much is"); units on one side only ("7pm"/"seven") and a date
word on one side only are not clashes. A minimal edit that swaps a content word ("adults" -> "children", "economy" -> "business")
passes neither. The guard never raises; anything it cannot read is a rejection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from functools import lru_cache

from cache.lexicon import (
    CONTRACTIONS,
    DATE_WORDS,
    FILLER_PHRASES,
    FILLERS,
    FUNCTION_WORDS,
    NEGATORS,
    NUMBER_WORDS,
    REWRITES,
    antonym_map,
    synonym_map,
)

ANTONYMS = antonym_map()
STEM_ANTONYMS: dict[str, set[str]] = {}
SYNONYMS = synonym_map()
NEGATING_PREFIXES = ("non", "un", "dis", "in", "im", "ir", "il", "de", "anti")
_TOKEN = re.compile(r"[a-z]+[0-9]*[a-z0-9]*|[0-9]+(?:\.[0-9]+)?[a-z]*")
_ENTITY = re.compile(r"\b(?:[A-Z][a-zA-Z0-9'&.-]*|[a-zA-Z]*[0-9][a-zA-Z0-9]*)\b")


@dataclass
class Question:
    """A question read once: its tokens, content words, numbers, entities, negations."""

    text: str
    tokens: list[str]
    content: list[str]
    numbers: list[str]
    entities: set[str]
    negations: int


@dataclass
class GuardConfig:
    reword_threshold: float = 0.78  # default bar for (b); the route's threshold overrides it
    max_unmatched: int = 0  # content words of one side with no match in the other
    lexical_floor: float = 0.35  # similarity enough when the words match (typos, fillers)
    reword_overlap: float = 0.65  # token-sequence overlap under which a pair counts as reworded
    few_unmatched: int = 2  # a rewording with at most this many unmatched words a side ...
    few_unmatched_relief: float = 0.10  # ... needs this much less similarity (train split)
    fuzzy: bool = True  # tolerate typos (one edit in words of 5+ letters, two in 8+)


@dataclass
class Verdict:
    ok: bool
    reason: str = "ok"
    details: dict = field(default_factory=dict)


_FILLER_PHRASE = re.compile(r"\b(?:" + "|".join(FILLER_PHRASES) + r")\b")
_REWRITES = [(re.compile(pattern), repl) for pattern, repl in REWRITES]


def normalize(text: str) -> str:
    t = text.replace("\u2019", "'").replace("\u2018", "'").lower()
    t = _FILLER_PHRASE.sub(" ", t)
    for k, v in CONTRACTIONS.items():
        t = t.replace(k, v)
    for pattern, repl in _REWRITES:
        t = pattern.sub(repl, t)
    t = re.sub(r"(?<=\d),(?=\d{3})", "", t)  # 2,000 -> 2000
    t = re.sub(r"(?<=[a-z])-(?=[a-z])", "", t)  # wi-fi -> wifi, e-mail -> email
    return t


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


@lru_cache(maxsize=4096)
def read(text: str) -> Question:
    norm = normalize(text)
    tokens = [t for t in _TOKEN.findall(norm)]
    while tokens and tokens[0] in FILLERS:
        tokens.pop(0)
    while tokens and tokens[-1] in FILLERS:
        tokens.pop()
    numbers = sorted(_number(t) for t in tokens if _number(t) is not None)
    content = [t for t in tokens if t not in FUNCTION_WORDS and t not in FILLERS
               and t not in NEGATORS and _number(t) is None]
    return Question(
        text=text, tokens=tokens, content=content, numbers=numbers,
        entities=_entities(text), negations=sum(t in NEGATORS for t in tokens),
    )


def _number(token: str) -> str | None:
    if token in NUMBER_WORDS:
        return f"{NUMBER_WORDS[token]:g}"
    m = re.match(r"^([0-9]+(?:\.[0-9]+)?)([a-z]*)$", token)
    if m:
        unit = m.group(2)
        unit = "" if unit in ("st", "nd", "rd", "th", "s") else unit
        return f"{float(m.group(1)):g}{unit}"
    return None


def _same_numbers(a: list[str], b: list[str]) -> bool:
    """Equal lists, where a unit on one side only ("7pm" / "seven", "2kg" / "2") is allowed."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        vx, vy = re.match(r"[0-9.]+", x), re.match(r"[0-9.]+", y)
        if x != y and (vx.group(0) != vy.group(0) or (x != vx.group(0) and y != vy.group(0))):
            return False
    return True


def _entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start, acronyms, words with digits."""
    out: set[str] = set()
    sentences = re.split(r"(?<=[.?!])\s+", text.strip())
    for sentence in sentences:
        for i, m in enumerate(_ENTITY.finditer(sentence)):
            word = m.group(0).strip(".'").removesuffix("'s")
            if "'" in word or not word or _number(word.lower()) is not None or word.lower() in FUNCTION_WORDS or word.lower() in FILLERS:
                continue
            if word == "I" or (i == 0 and m.start() == 0 and not word[1:].isupper()
                               and not any(c.isdigit() for c in word)):
                continue
            out.add(word.lower())
    return out


@lru_cache(maxsize=65536)
def _typo(a: str, b: str, max_edits: int = 2) -> bool:
    """A slip of the keyboard: one edit in words of 5+ letters, two in words of 8+."""
    if a == b or max(len(a), len(b)) < 5 or min(len(a), len(b)) < 4:
        return False
    limit = min(max_edits, 2 if min(len(a), len(b)) >= 8 else 1)
    return abs(len(a) - len(b)) <= limit and _edits(a, b, limit) <= limit


def _edits(a: str, b: str, limit: int) -> int:
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


def _stem_antonyms() -> dict[str, set[str]]:
    """The antonym map over stems, so "increased"/"decreased" reads as "increase"/"decrease"."""
    out: dict[str, set[str]] = {}
    for word, opposites in ANTONYMS.items():
        out.setdefault(stem(word), set()).update(stem(x) for x in opposites)
    return out


STEM_ANTONYMS.update(_stem_antonyms())


@lru_cache(maxsize=65536)
def _opposite(a: str, b: str) -> bool:
    if b in ANTONYMS.get(a, ()) or stem(b) in STEM_ANTONYMS.get(stem(a), ()):
        return True
    for x, y in ((a, b), (b, a)):
        if len(y) >= 4 and len(x) > len(y) and x.endswith(y) \
                and x[: len(x) - len(y)].rstrip("-") in NEGATING_PREFIXES:
            return True
    if a.startswith("in") and b.startswith("ex") and a[2:] == b[2:]:
        return True
    return b.startswith("in") and a.startswith("ex") and a[2:] == b[2:]


def _same_family(a: str, b: str) -> bool:
    """connect/connection, withdraw/withdrawal: one stem extends the other by a suffix."""
    short, long_ = sorted((stem(a), stem(b)), key=len)
    return len(short) >= 5 and long_.startswith(short) and len(long_) - len(short) <= 4


def _synonyms(word: str) -> set[str]:
    return SYNONYMS.get(word, set()) | SYNONYMS.get(stem(word), set())


def _matched(word: str, other: Question, fuzzy: bool) -> bool:
    s = stem(word)
    syns = {stem(x) for x in _synonyms(word)}
    for w in other.content:
        if w == word or stem(w) == s or _same_family(w, word):
            return True
        if fuzzy and _typo(w, word):
            return True
    return any(w in syns or stem(w) in syns for w in other.tokens)


ROLE_WORDS = frozenset("from to into onto for with by before after over under".split())
SAME_ROLE = {"into": "to", "onto": "to"}


def _roles(q: Question) -> set[tuple[str, str]]:
    """(preposition, content stem) pairs: "from savings", "to current"."""
    out = set()
    for i, tok in enumerate(q.tokens):
        if tok in ROLE_WORDS:
            nxt = next((t for t in q.tokens[i + 1:i + 4] if t in q.content), None)
            if nxt:
                out.add((SAME_ROLE.get(tok, tok), stem(nxt)))
    return out


DIRECTIONS = frozenset({"from", "to"})


def _swapped(a: Question, b: Question, only: frozenset[str] | None = None) -> bool:
    """The same content word governed by different prepositions on the two sides (`only`:
    count only these prepositions, e.g. the direction of a transfer in a reworded pair)."""
    ra, rb = dict((w, p) for p, w in _roles(a)), dict((w, p) for p, w in _roles(b))
    return any(w in rb and rb[w] != p and (only is None or {p, rb[w]} <= only)
               for w, p in ra.items())


def _order(q: Question) -> list[str]:
    """Named entities in reading order (catches "from MySQL to Postgres" vs the reverse)."""
    return [t for t in q.tokens if t in q.entities]


def _one_swap(matcher: SequenceMatcher) -> bool:
    """A minimal edit: one short span replaced, the rest equal ("for a child" / "for an
    expert"). Short questions have low overlap after one swap, but it is not a rewording."""
    edits = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    return len(edits) == 1 and edits[0][2] - edits[0][1] <= 2 and edits[0][4] - edits[0][3] <= 2


class Guard:
    """`check(cached_text, new_text, similarity) -> Verdict`; never raises."""

    def __init__(self, config: GuardConfig | None = None) -> None:
        self.config = config or GuardConfig()

    def check(self, cached: str, new: str, similarity: float,
              threshold: float | None = None) -> Verdict:
        """`threshold`: the similarity a reworded question needs (default: the config's)."""
        bar = self.config.reword_threshold if threshold is None else threshold
        try:
            return self._check(read(cached), read(new), similarity, bar)
        except Exception as exc:  # a guard that cannot decide rejects
            return Verdict(False, "guard_error", {"error": repr(exc)})

    def _check(self, a: Question, b: Question, similarity: float, bar: float) -> Verdict:
        if not _same_numbers(a.numbers, b.numbers):
            return Verdict(False, "numbers", {"a": a.numbers, "b": b.numbers})
        if a.negations != b.negations:
            return Verdict(False, "negation")
        only_a = set(a.tokens) - set(b.tokens)
        only_b = set(b.tokens) - set(a.tokens)
        for x in only_a:
            for y in only_b:
                if _opposite(x, y):
                    return Verdict(False, "antonym", {"a": x, "b": y})
        dates_a = {t for t in a.tokens if t in DATE_WORDS}
        dates_b = {t for t in b.tokens if t in DATE_WORDS}
        if dates_a and dates_b and {stem(d) for d in dates_a} != {stem(d) for d in dates_b}:
            return Verdict(False, "dates", {"a": sorted(dates_a), "b": sorted(dates_b)})
        fuzzy = self.config.fuzzy
        words_a = {t for t in a.tokens}
        words_b = {t for t in b.tokens}
        for ent in a.entities ^ b.entities:
            other = words_b if ent in a.entities else words_a
            if ent not in other and not any(_typo(ent, w, 1) for w in other) \
                    and not _synonyms(ent) & other:
                return Verdict(False, "entity", {"entity": ent})
        missing_a = [w for w in a.content if not _matched(w, b, fuzzy)]
        missing_b = [w for w in b.content if not _matched(w, a, fuzzy)]
        unmatched = len(set(missing_a)) + len(set(missing_b))
        if _order(a) != _order(b) and sorted(_order(a)) == sorted(_order(b)):
            return Verdict(False, "order")
        if _swapped(a, b, None if unmatched <= self.config.max_unmatched else DIRECTIONS):
            return Verdict(False, "roles")
        if unmatched <= self.config.max_unmatched:
            if similarity >= self.config.lexical_floor:
                return Verdict(True, "ok", {"unmatched": unmatched})
            return Verdict(False, "similarity")
        matcher = SequenceMatcher(None, a.tokens, b.tokens, autojunk=False)
        few = self.config.few_unmatched
        if len(set(missing_a)) <= few and len(set(missing_b)) <= few:
            bar -= self.config.few_unmatched_relief  # most words line up: likely synonyms
        if matcher.ratio() < self.config.reword_overlap and similarity >= bar \
                and not _one_swap(matcher):
            return Verdict(True, "reworded", {"unmatched": unmatched})
        return Verdict(False, "content", {"a": sorted(set(missing_a)),
                                          "b": sorted(set(missing_b))})
