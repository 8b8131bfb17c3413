"""Token-level pruning in the style of LLMLingua: drop what a small LM finds predictable.

A small causal LM (any `TokenScorer`; the bundled engine's model works) scores every token
of the context; tokens it predicts well carry little information. Pruning works on whole
words (a word's surprisal is the sum over its tokens) so the kept text stays readable, keeps
words with digits (facts are usually numbers), and keeps the highest-surprisal words until
`target_ratio` of the tokens remain, in their original order. Worth it only when the
upstream model is far more expensive per token than the scorer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prompts.interfaces import TokenScorer

SCORE_WINDOW = 1024  # tokens scored per call (the scorer's context bounds this)


@dataclass
class PruneResult:
    text: str
    tokens_in: int
    tokens_out: int


def _word_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """[start, end) token ranges of words: a word starts at a token beginning with
    whitespace (or after a newline), so "D-466," and "2,345,000" stay whole."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(pieces)):
        if pieces[i][:1].isspace() or pieces[i - 1].endswith("\n"):
            spans.append((start, i))
            start = i
    if pieces:
        spans.append((start, len(pieces)))
    return spans


async def score_tokens(ids: list[int], scorer: TokenScorer) -> list[float]:
    """Surprisal (-logprob) per token, scored in windows the scorer can hold."""
    surprisal: list[float] = []
    for start in range(0, len(ids), SCORE_WINDOW):
        logprobs = await scorer.token_logprobs(ids[start:start + SCORE_WINDOW])
        surprisal.extend(-lp for lp in logprobs)
    if surprisal:
        surprisal[0] = math.inf  # no context: always keep the opening token
    return surprisal


async def prune_text(text: str, scorer: TokenScorer, target_ratio: float = 0.5) -> PruneResult:
    """`text` with its most predictable words removed, down to about `target_ratio` tokens."""
    ids = scorer.encode(text)
    if len(ids) < 8:
        return PruneResult(text, len(ids), len(ids))
    surprisal = await score_tokens(ids, scorer)
    pieces = [scorer.decode([i]) for i in ids]
    spans = _word_spans(pieces)
    budget = max(1, int(len(ids) * target_ratio))
    keep = [False] * len(spans)
    used = 0
    for w, (a, b) in enumerate(spans):  # facts first: numbers and line structure
        if any(ch.isdigit() for p in pieces[a:b] for ch in p) or "\n" in "".join(pieces[a:b]):
            keep[w], used = True, used + (b - a)
    order = sorted(range(len(spans)), key=lambda w: -sum(surprisal[spans[w][0]:spans[w][1]]))
    for w in order:
        a, b = spans[w]
        if keep[w] or used + (b - a) > budget:
            continue
        keep[w], used = True, used + (b - a)
    kept_ids = [i for w, (a, b) in enumerate(spans) if keep[w] for i in ids[a:b]]
    return PruneResult(scorer.decode(kept_ids), len(ids), len(kept_ids))
