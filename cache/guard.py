"""The guard: decides whether a cached question's answer also answers a new question.

Cosine similarity alone cannot: "cancel my subscription" / "do NOT cancel my subscription"
score 0.97+, above many true rewordings. Every candidate goes through two stages:

1. exact checks (cache/checks.py): different numbers, units, dates or identifiers, or a
   "not" on one side only, reject at once, whatever the wording;
2. the pair verifier (cache/pair_model.py), a cross-encoder that reads both questions
   together in both orders, serves the candidate when its score reaches the threshold
   chosen by cross-validation (at most 1% of held-out near misses served).

Two questions that read the same once normalised (case, punctuation, fillers, contractions)
pass without the model. The guard never raises: anything it cannot read is a rejection
with reason `guard_error`, so a test asserting another reason catches a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from cache import pair_model
from cache.checks import Clash, clash
from cache.pair_model import PairModel
from cache.question import read

log = logging.getLogger("headstart.cache")
Reason = Literal["same_text", "verified", "verifier", "no_verifier", "numbers", "units",
                 "dates", "identifiers", "negation", "guard_error"]
_SHARED = object()


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate may be served, and why: the check that rejected it (`clash`) or
    the verifier's score against its threshold."""

    ok: bool
    reason: Reason
    score: float | None = None
    clash: Clash | None = None


class Guard:
    """`check(cached, new)` or `check_many(cached_list, new)` -> Verdicts; never raises."""

    def __init__(self, model: PairModel | None | object = _SHARED,
                 threshold: float | None = None) -> None:
        self._model = model
        self._threshold = threshold

    @property
    def model(self) -> PairModel | None:
        if self._model is _SHARED:
            self._model = pair_model.shared()
        return self._model  # type: ignore[return-value]

    def threshold(self, override: float | None = None) -> float:
        """The verifier score a candidate needs: `override`, the guard's own, or the model's."""
        if override is not None:
            return override
        if self._threshold is not None:
            return self._threshold
        return self.model.threshold if self.model is not None else 1.0

    def check(self, cached: str, new: str, threshold: float | None = None) -> Verdict:
        return self.check_many([cached], new, threshold)[0]

    def check_many(self, cached: list[str], new: str,
                   threshold: float | None = None) -> list[Verdict]:
        """One verdict per cached question; the verifier reads every candidate that passed
        the exact checks in one batch."""
        try:
            return self._check_many(cached, new, self.threshold(threshold))
        except Exception as exc:  # a guard that cannot decide rejects
            log.warning("guard failed (%r); rejecting %d candidates", exc, len(cached))
            return [Verdict(False, "guard_error") for _ in cached]

    def _check_many(self, cached: list[str], new: str, bar: float) -> list[Verdict]:
        verdicts: list[Verdict | None] = []
        for text in cached:
            if read(text).tokens == read(new).tokens:
                verdicts.append(Verdict(True, "same_text"))
            elif (found := clash(text, new)) is not None:
                verdicts.append(Verdict(False, found.reason, clash=found))
            else:
                verdicts.append(None)
        todo = [i for i, v in enumerate(verdicts) if v is None]
        if todo and self.model is None:
            for i in todo:
                verdicts[i] = Verdict(False, "no_verifier")
        elif todo:
            scores = self.model.score([(cached[i], new) for i in todo])
            for i, s in zip(todo, scores, strict=True):
                score = round(float(s), 4)
                verdicts[i] = Verdict(score >= bar, "verified" if score >= bar else "verifier",
                                      score=score)
        return [v for v in verdicts if v is not None]
