"""The guard: decides whether a cached question's answer also answers a new question.

Cosine similarity alone cannot: "cancel my subscription" / "do NOT cancel my subscription"
score 0.97+, above many true rewordings. Every candidate goes through two stages:

1. exact checks (cache/checks.py): different numbers (with their signs and units),
   units, dates, identifiers or operators, a "not" on one side only, a word against its
   prefixed opposite, swapped source and target or two things trading places, or two
   look-alike identifiers reject at once, whatever the wording;
2. the pair verifier (cache/pair_model.py), a cross-encoder that reads both questions
   together in both orders, without the greetings and thanks around them, serves the
   candidate when its score reaches the threshold chosen by cross-validation (at most 1%
   of held-out near misses served).

Both stages read the questions with their typos mended (cache/typos.py: a misspelt word
takes the spelling of the one English word it is one edit from on the other side). Two
questions that read the same once normalised (case, punctuation, fillers, contractions),
or alike but for a clause moved from one end to the other, pass without the model. In a
`semantic` context (cache/keys.py, `verify_text`) each side is the question and the earlier
turns: the exact checks compare the questions and the facts named anywhere in the turns,
then the verifier reads both conversations whole, against a threshold of their own
(cross-validated on conversation pairs). The guard never raises: anything it cannot read
is a rejection with reason `guard_error`, so a test asserting another reason catches a
crash.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from cache import pair_model
from cache.checks import Clash, any_clash
from cache.keys import TURN_SEP
from cache.pair_model import PairModel
from cache.question import normal_form, read, without_fillers
from cache.typos import mend_typos

log = logging.getLogger("headstart.cache")
Reason = Literal["same_text", "verified", "learned", "verifier", "no_verifier", "numbers",
                 "units", "dates", "identifiers", "names", "negation", "opposite", "swapped",
                 "lookalike", "context", "refused", "explored", "guard_error"]
_SHARED = object()


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate may be served, and why: the check that rejected it (`clash`) or
    the verifier's score against its threshold."""

    ok: bool
    reason: Reason
    score: float | None = None
    clash: Clash | None = None
    bound: bool = False  # `score` is one reading's bound (p + 1) / 2, not both orders' mean


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

    def threshold(self, override: float | None = None, conversation: bool = False) -> float:
        """The verifier score a candidate needs: `override`, the guard's own, or the model's
        (for questions, or for conversations)."""
        if override is not None:
            return override
        if self._threshold is not None:
            return self._threshold
        if self.model is None:
            return 1.0
        config = self.model.config
        return config.conversation_threshold if conversation else config.threshold

    def check(self, cached: str, new: str, threshold: float | None = None) -> Verdict:
        return self.check_many([cached], new, threshold)[0]

    def check_many(self, cached: list[str], new: str, threshold: float | None = None,
                   bars: list[float] | None = None) -> list[Verdict]:
        """One verdict per cached question; the verifier reads every candidate that passed
        the exact checks in one batch. `bars`: the score each candidate needs, where its
        entry's judged evidence lowered it under the threshold (a pass under the threshold
        is `learned`)."""
        try:
            bar = self.threshold(threshold, conversation=TURN_SEP in new)
            return self._check_many(cached, new, bar, bars)
        except Exception as exc:  # a guard that cannot decide rejects
            log.warning("guard failed (%r); rejecting %d candidates", exc, len(cached))
            return [Verdict(False, "guard_error") for _ in cached]

    def _check_many(self, cached: list[str], new: str, bar: float,
                    bars: list[float] | None) -> list[Verdict]:
        """Each candidate against `new`, typos mended (cache/typos.py): the same text once
        normalised passes; another number of turns (a `semantic` context) or an exact clash
        fails; the verifier reads the rest in one batch, conversations whole against the
        conversation threshold."""
        verdicts: list[Verdict | None] = []
        asks: list[int] = []
        mended = [mend_typos(text, new) for text in cached]
        for i, (text, asked) in enumerate(mended):
            verdicts.append(exact_verdict(text, asked))
            if verdicts[-1] is None:
                asks.append(i)
        if asks and self.model is None:
            for i in asks:
                verdicts[i] = Verdict(False, "no_verifier")
        elif asks:
            pairs = [(model_text(mended[i][0]), model_text(mended[i][1])) for i in asks]
            need = bars or [bar] * len(cached)  # `bars`: a route with a judge
            lowest = min(min(need[i] for i in asks), bar)
            scores = self.model.score(pairs, at_least=lowest)
            for i, pair, s in zip(asks, pairs, scores, strict=True):
                ok = float(s) >= need[i]  # decided unrounded: a bound just under passes nothing
                reason = ("verified" if float(s) >= bar else "learned") if ok else "verifier"
                bound = bars is not None and not ok and not self.model.read_both(pair)
                verdicts[i] = Verdict(ok, reason, score=round(float(s), 4), bound=bound)
        return verdicts  # type: ignore[return-value]


def same_text(cached: str, new: str) -> bool:
    """Whether the two read the same once normalised (every turn, in a context), or one is
    the other with a clause moved from one end to the other ("In Peru, which languages are
    spoken?" / "Which languages are spoken in Peru?")."""
    if normal_form(cached) == normal_form(new):
        return True
    return TURN_SEP not in cached and TURN_SEP not in new and \
        (_clause_moved(cached, new) or _clause_moved(new, cached))


def exact_verdict(cached: str, new: str) -> Verdict | None:
    """The verdict on two mended texts reached without the verifier, or None when the
    verifier decides: another number of turns fails, the same text passes, an exact clash
    fails."""
    if cached.count(TURN_SEP) != new.count(TURN_SEP):
        return Verdict(False, "context")
    if same_text(cached, new):
        return Verdict(True, "same_text")
    if (found := any_clash(cached, new)) is not None:
        return Verdict(False, found.reason, clash=found)
    return None


_CLAUSE_END = re.compile(r"[,;:]\s+")


def _clause_moved(a: str, b: str) -> bool:
    """Whether `b` reads as `a` with its part before a comma (or colon, semicolon) moved to
    the end: a fronted clause keeps its own words in order, where swapped arguments do not."""
    want = read(b).tokens
    return any(read(f"{a[m.end():]} {a[:m.start()]}").tokens == want
               for m in _CLAUSE_END.finditer(a))


def model_text(verify_text: str) -> str:
    """What the pair model reads of a verify text: the question without the greetings and
    thanks around it (`without_fillers`: "hey there! ... any idea?" made the verifier
    serve near misses), then a conversation's turns, one per line."""
    question, *turns = verify_text.split(TURN_SEP)
    return "\n".join([without_fillers(question), *turns])
