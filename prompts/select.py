"""Query-aware passage selection for long contexts (RAG documents, pasted files).

Split the context into passages, rank them against the question — BM25 over words, and
cosine similarity of sentence embeddings when an embed function is given (the two rank
lists are fused by reciprocal rank) — then keep the best passages that fit the token budget
and emit them in their original order, with a marker where text was left out.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from prompts.interfaces import EmbedFn

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a about an and are as at be by can could do does for from give has have how i in is it its "
    "know me much many of on or our please should tell that the their there they this to was "
    "we were what when where which who why will with would you your".split())
GAP = "[...]"


@dataclass
class Passage:
    index: int
    text: str
    tokens: int
    score: float = 0.0


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def split_passages(text: str, count: Callable[[str], int], max_tokens: int = 160) -> list[Passage]:
    """Paragraphs, with long ones split at sentence ends and short neighbours merged."""
    pieces: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        if not para.strip():
            continue
        if count(para) <= max_tokens:
            pieces.append(para)
            continue
        current = ""
        for sentence in re.split(r"(?<=[.!?])\s+", para):
            if current and count(current + " " + sentence) > max_tokens:
                pieces.append(current)
                current = sentence
            else:
                current = f"{current} {sentence}" if current else sentence
        if current:
            pieces.append(current)
    merged: list[str] = []
    for piece in pieces:
        if merged and count(merged[-1]) + count(piece) <= max_tokens // 2:
            merged[-1] = f"{merged[-1]}\n\n{piece}"
        else:
            merged.append(piece)
    return [Passage(i, p, count(p)) for i, p in enumerate(merged)]


def bm25_scores(query: str, passages: list[Passage], k1: float = 1.5, b: float = 0.75) -> list[float]:
    docs = [words(p.text) for p in passages]
    if not docs:
        return []
    avg_len = sum(len(d) for d in docs) / len(docs) or 1.0
    df = Counter(w for d in docs for w in set(d))
    n = len(docs)
    scores = []
    for doc in docs:
        tf = Counter(doc)
        s = 0.0
        for w in set(words(query)):
            if w not in tf:
                continue
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(doc) / avg_len))
        scores.append(s)
    return scores


def _ranks(scores: list[float]) -> list[int]:
    """Competition ranks: ties share a rank, so a scorer with no opinion does not vote."""
    ordered = sorted(scores, reverse=True)
    first = {}
    for r, s in enumerate(ordered):
        first.setdefault(s, r)
    return [first[s] for s in scores]


async def rank_passages(query: str, passages: list[Passage], embed: EmbedFn | None = None,
                        rrf_k: int = 60) -> list[Passage]:
    """Set `score` on each passage: BM25, fused with embedding similarity when available."""
    lexical = bm25_scores(query, passages)
    if embed is None:
        for p, s in zip(passages, lexical, strict=True):
            p.score = s
        return passages
    vectors = np.asarray(await embed([query] + [p.text for p in passages]))
    semantic = (vectors[1:] @ vectors[0]).tolist()
    for p, lr, sr in zip(passages, _ranks(lexical), _ranks(semantic), strict=True):
        p.score = 1 / (rrf_k + lr) + 1 / (rrf_k + sr)
    return passages


def pick_within_budget(passages: list[Passage], budget: int, keep: set[int] | None = None) -> str:
    """Best-scoring passages that fit `budget`, joined in original order with gap markers."""
    keep = keep or set()
    chosen = {p.index for p in passages if p.index in keep}
    used = sum(p.tokens for p in passages if p.index in chosen)
    for p in sorted(passages, key=lambda p: -p.score):
        if p.index not in chosen and used + p.tokens <= budget:
            chosen.add(p.index)
            used += p.tokens
    parts: list[str] = []
    previous = -1
    for p in passages:
        if p.index not in chosen:
            continue
        if p.index != previous + 1:
            parts.append(GAP)
        parts.append(p.text)
        previous = p.index
    if passages and previous != passages[-1].index:
        parts.append(GAP)
    return "\n\n".join(parts)


async def select_passages(text: str, query: str, budget: int, count: Callable[[str], int],
                          embed: EmbedFn | None = None, keep_last: bool = False,
                          passage_tokens: int = 160) -> str:
    """`text` cut down to about `budget` tokens of the passages most relevant to `query`."""
    passages = split_passages(text, count, passage_tokens)
    if sum(p.tokens for p in passages) <= budget:
        return text
    await rank_passages(query, passages, embed)
    keep = {passages[-1].index} if keep_last and passages else set()
    return pick_within_budget(passages, budget, keep)
