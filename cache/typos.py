"""Mending a typo in one question toward the word the other question spells right.

The verifier reads "How do I sfoten brown sugar?" as a different question from "How do I
soften brown sugar?" more often than not: a misspelt word is a word it has never seen, and
its training also teaches it that one letter can change an identifier. A misspelling is
told apart from a look-alike identifier by one rule that holds in any vocabulary: the word
is no English word (WordNet's lemmas, `cache.question.is_word`), the other question holds
exactly one English word of four or more letters one edit away (a letter dropped, added,
replaced, or two swapped) that this one lacks, and both are written as plain words: letters
only, lower case but perhaps the first, standing alone between spaces and punctuation.
Inside a name (a capitalised word right after another) a replaced letter is no typo: "the
Pelago Trak" is a product, not a misspelt "Trek", where "the Roman Empirre" is a slip.
Names in capitals, `camelCase`, codes like "XR200" and anything joined to a dot, slash,
underscore, hyphen or bracket ("str.lstrip", "lithium-ion") are never touched, and neither
are two different English words ("bake" / "make"), so look-alike identifiers reach the exact
checks and the verifier as written. Two plain words that the other question writes as one
English word ("over night" / "overnight", "butter milk" / "buttermilk") are joined.
"""

from __future__ import annotations

import re

from cache.question import edits, is_word

_CHUNK = re.compile(r"\S+")
_PLAIN = re.compile(r"([A-Z]?[a-z]+)(?:'[a-z]+)?")
_EDGE = ".,;:!?\"'()"


def _plain_words(text: str) -> list[tuple[int, int, str, bool]]:
    """(start, end, word in lower case, in a name) of every plain word in `text` (see the
    module docstring); a word with an apostrophe ("Python's") counts by its letters before
    it. A capitalised word right after another inside a sentence is part of a name."""
    found = []
    named = False  # the previous chunk is a capitalised word inside a sentence
    for i, chunk in enumerate(_CHUNK.finditer(text)):
        core = chunk.group(0).strip(_EDGE)
        capital = core[:1].isupper()
        if core and (m := _PLAIN.fullmatch(core)):
            start = chunk.start() + chunk.group(0).find(core)
            found.append((start, start + m.end(1), m.group(1).lower(), capital and named))
        named = capital and i > 0 and chunk.group(0)[-1] not in ".?!:,;"
    return found


def _slip(word: str, target: str, name: bool) -> bool:
    """Whether `word` is `target` mistyped: one edit, and inside a name only a letter
    doubled, dropped or two swapped ("Empirre", "Mdoel"): a letter replaced there makes
    another name ("the Pelago Trak" is a product, not a misspelt "Trek")."""
    if abs(len(target) - len(word)) > 1 or edits(word, target, 1) > 1:
        return False
    return not name or len(word) != len(target) or sorted(word) == sorted(target)


def _mend(text: str, words: list[tuple[int, int, str, bool]], other: set[str]) -> str:
    """`text` (its plain `words`) with each typo mended toward a word of `other`."""
    own = {word for _, _, word, _ in words}
    targets = [w for w in other if len(w) >= 4 and w not in own and is_word(w)]
    if not targets:
        return text
    out, last, skip = [], 0, False
    for i, (start, end, word, name) in enumerate(words):
        if skip:
            skip = False
            continue
        nxt = words[i + 1] if i + 1 < len(words) else None
        if nxt and text[end:nxt[0]] == " " and word + nxt[2] in targets:  # "over night"
            fix, end, skip = word + nxt[2], nxt[1], True
        elif len(word) < 3 or word in other or is_word(word):
            continue
        else:
            near = [t for t in targets if _slip(word, t, name)]
            if len(near) != 1:
                continue
            fix = near[0]
        out += [text[last:start], fix.capitalize() if text[start].isupper() else fix]
        last = end
    return "".join(out) + text[last:] if out else text


def mend_typos(cached: str, new: str) -> tuple[str, str]:
    """Both texts with each misspelt word replaced by the other's correctly spelt one (see
    the module docstring for when a word counts as misspelt); unchanged when none is."""
    a, b = _plain_words(cached), _plain_words(new)
    return (_mend(cached, a, {word for _, _, word, _ in b}),
            _mend(new, b, {word for _, _, word, _ in a}))
