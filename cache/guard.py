"""The guard: decides whether a cached question's answer also answers a new question.

Cosine similarity alone cannot: "cancel my subscription" / "do NOT cancel my subscription"
score 0.97+, above many true rewordings. Every candidate goes through two stages:

1. exact checks (cache/checks.py): different numbers, units, dates or identifiers, or a
   "not" on one side only, reject at once, whatever the wording;
2. the pair verifier (cache/pair_model.py), a cross-encoder that reads both questions
   together in both orders, serves the candidate when its score reaches the threshold
   chosen by cross-validation (at most 1% of held-out near misses served).

Two questions that read the same once normalised (case, punctuation, fillers, contractions)
pass without the model. In a `semantic` context (cache/keys.py, `verify_text`) each side is
the question and the earlier turns: every turn must pass, and the lowest score counts. The guard never raises: anything it cannot read is a rejection
with reason `guard_error`, so a test asserting another reason catches a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from cache import pair_model
from cache.checks import Clash, clash
from cache.keys import TURN_SEP
from cache.pair_model import PairModel
from cache.question import read

log = logging.getLogger("headstart.cache")
Reason = Literal["same_text", "verified", "verifier", "no_verifier", "numbers", "units",
                 "dates", "identifiers", "negation", "context", "guard_error"]
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

    @staticmethod
    def same_text(cached: str, new: str) -> bool:
        """Whether the two read the same once normalised (every turn, in a context)."""
        a, b = cached.split(TURN_SEP), new.split(TURN_SEP)
        return len(a) == len(b) and all(read(x).tokens == read(y).tokens
                                        for x, y in zip(a, b, strict=True))

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
        """Each candidate turn by turn (one turn unless a `semantic` context joined them):
        every turn must pass; the verifier reads all undecided turns in one batch."""
        new_turns = new.split(TURN_SEP)
        verdicts: list[Verdict | None] = []
        asks: list[tuple[int, str, str]] = []  # (candidate, cached turn, new turn)
        for i, text in enumerate(cached):
            turns = text.split(TURN_SEP)
            verdict = None if len(turns) == len(new_turns) else Verdict(False, "context")
            for a, b in zip(turns, new_turns, strict=False) if verdict is None else ():
                if read(a).tokens == read(b).tokens:
                    continue
                if (found := clash(a, b)) is not None:
                    verdict = Verdict(False, found.reason, clash=found)
                    break
                asks.append((i, a, b))
            verdicts.append(verdict)
        asks = [x for x in asks if verdicts[x[0]] is None]
        if asks and self.model is None:
            for i, _, _ in asks:
                verdicts[i] = Verdict(False, "no_verifier")
        elif asks:
            lowest: dict[int, float] = {}
            for (i, _, _), s in zip(asks, self.model.score([(a, b) for _, a, b in asks]),
                                    strict=True):
                lowest[i] = min(lowest.get(i, 1.0), round(float(s), 4))
            for i, score in lowest.items():
                verdicts[i] = Verdict(score >= bar, "verified" if score >= bar else "verifier",
                                      score=score)
        return [v or Verdict(True, "same_text") for v in verdicts]
