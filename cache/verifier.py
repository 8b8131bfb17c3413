"""A learned second opinion on reworded questions the guard's word rules could not match.

The guard serves a reworded question only at the route's similarity bar, but MiniLM scores
many true paraphrases well under it ("How do I upgrade my plan?" / "How can I move to a
higher tier?"). Fitted on the labelled pairs' train split (cache/fit_verifier.py), a small
logistic regression tells those apart from reworded questions that ask something else. It
only ever relaxes
the soft "content" rejection of a reworded pair, never negation, antonyms, numbers, dates,
entities, order or roles, and never below `bar - relief` similarity. Its evidence is the
similarity and how well the words the rules left unmatched are said by the other side when
read in context (`alignment`). Word counts alone (few unmatched words = a paraphrase) fitted
the train split well but served reworded different questions of our own (tests/cache/data/
extra_pairs_3.jsonl, _4), so they are not features.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

WEIGHTS = Path(__file__).with_name("data") / "verifier.json"
FEATURES = ("similarity", "aligned")


def _word_rows(pieces: list[str], words: tuple[str, ...]) -> list[int]:
    """Rows of the word pieces that spell one of `words` (pieces of a word joined; a word
    the guard normalised, "glutenfree" for "gluten-free", matches by a shared prefix)."""
    spans: list[tuple[str, list[int]]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith("##") and spans:
            spans[-1] = (spans[-1][0] + piece[2:], spans[-1][1] + [i])
        else:
            spans.append((piece, [i]))
    wanted = set(words)
    return [r for word, rows in spans
            if word in wanted or (len(word) > 3 and any(
                len(w) > 3 and (w.startswith(word) or word.startswith(w)) for w in wanted))
            for r in rows]


def alignment(a: tuple[np.ndarray, list[str]], b: tuple[np.ndarray, list[str]],
              words_a: tuple[str, ...], words_b: tuple[str, ...]) -> float:
    """How well each side's unmatched words are said by the other side, read in context
    (MiniLM's contextual word-piece vectors, BERTScore-style greedy matching): each
    unmatched piece's best cosine to any piece of the other side, averaged per side; the
    weaker side counts. "internet slow" finds "broadband sluggish"; "clean pan" does not
    find "season new skillet"."""
    sims = a[0] @ b[0].T
    rows_a, rows_b = _word_rows(a[1], words_a), _word_rows(b[1], words_b)
    side_a = float(sims[rows_a].max(1).mean()) if rows_a else 1.0
    side_b = float(sims[:, rows_b].max(0).mean()) if rows_b else 1.0
    return min(side_a, side_b)


@dataclass(frozen=True)
class PairSignals:
    """What the guard knows about a reworded pair when its word rules give up."""

    similarity: float
    text_a: str  # the cached question
    text_b: str  # the new question
    words_a: tuple[str, ...]  # content words of a the new question does not say
    words_b: tuple[str, ...]  # ... and of b the cached question does not say
    aligned: float = 0.0  # `alignment` of those words, once the caller has read the pieces

    def features(self) -> np.ndarray:
        return np.array([self.similarity, self.aligned], dtype=np.float64)

    def with_pieces(self, a: tuple[np.ndarray, list[str]],
                    b: tuple[np.ndarray, list[str]]) -> PairSignals:
        """These signals completed with the two texts' word-piece vectors."""
        return replace(self, aligned=alignment(a, b, self.words_a, self.words_b))


@dataclass(frozen=True)
class Verifier:
    """`score(signals)` in [0, 1]; a pair passes at `threshold` when its similarity is within
    `relief` of the bar (the guard checks that). Weights live in cache/data/verifier.json."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float  # the lowest score served (above every train-split trap's score)
    relief: float  # how far under the route's bar a verified rewording may be
    features: tuple[str, ...] = FEATURES

    @classmethod
    def load(cls, path: str | Path = WEIGHTS) -> Verifier | None:
        """The shipped weights, or None when the file is missing or for other features."""
        try:
            raw = json.loads(Path(path).read_text())
            raw = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()
                   if k in cls.__dataclass_fields__}
            verifier = cls(**raw)
        except (OSError, ValueError, TypeError):
            return None
        return verifier if verifier.features == FEATURES else None

    def save(self, path: str | Path = WEIGHTS) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")

    def score(self, signals: PairSignals) -> float:
        z = (signals.features() - np.asarray(self.mean)) / np.asarray(self.scale)
        logit = float(z @ np.asarray(self.coef)) + self.intercept
        return float(1.0 / (1.0 + np.exp(-logit)))



@lru_cache(maxsize=1)
def shipped() -> Verifier | None:
    """The verifier with the package's weights, read once per process."""
    return Verifier.load()
