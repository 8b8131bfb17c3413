"""A judge's verdict on a grey-zone pair, and what a judge is.

A judge reads a pair the verifier left under its threshold (the new question, the entry it
nearly matched) and says whether the entry's answer fully answers the new question. Two
ship: `agreement` (cache/agreement.py: the entry's answer against the fresh answer the
upstream just gave) and an upstream the operator trusts, asked in so many words
(cache/judge_prompt.py; the call itself is the gateway's, gateway/judges.py). Every verdict
carries its reason. A judge that cannot answer (its upstream down, a timeout) returns None:
no verdict, nothing promoted, refused or counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from cache.grey import GreyPair
from cache.stores.base import CacheEntry

JudgeReason = Literal[
    "yes", "no", "unparseable",  # an upstream's one-word verdict (unparseable counts as no)
    "agreed", "numbers", "dates", "identifiers", "dissimilar", "empty",  # agreement's
    "labelled",  # a judge that reads labels (the replay benchmark's oracle)
]


@dataclass(frozen=True)
class Judgement:
    """Whether the entry's answer fully answers the new question, who said so and why."""

    same: bool
    judge: str  # "agreement", "upstream:NAME", ...
    reason: JudgeReason
    similarity: float | None = None  # agreement: the two answers' cosine


class Judge(Protocol):
    """Reads one grey-zone pair against the entry as stored now; None: no verdict."""

    name: str

    async def __call__(self, pair: GreyPair, entry: CacheEntry) -> Judgement | None: ...


def answer_text(answer: dict) -> str:
    """The text of a stored answer (an `Answer.to_dict()`): its content, else its tool calls
    as written."""
    content = answer.get("content") or ""
    if content or not answer.get("tool_calls"):
        return content
    return " ".join(str(call.get("function", call)) for call in answer["tool_calls"])
