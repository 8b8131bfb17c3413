"""Token pruning keeps the surprising words (and numbers), in order, at the target ratio.

The scorer here is a plain stand-in for a small LM (a unigram model over the text itself),
enough to test the bookkeeping; `tests/gateway/test_transform_stage.py` runs the engine's
model as the scorer.
"""

from __future__ import annotations

import math
from collections import Counter

from prompts.prune import _word_spans, prune_text


class UnigramScorer:
    """log p(token) from token frequencies in what it scores: repeated words are predictable."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))

    async def token_logprobs(self, ids) -> list[float]:
        freq = Counter(ids)
        return [0.0] + [math.log(freq[i] / len(ids)) for i in ids[1:]]


def test_word_spans_group_subword_tokens():
    assert _word_spans(["The", " quick", "est", " fox", ",", " D", "-", "466", "\n", "x"]) == [
        (0, 1), (1, 3), (3, 5), (5, 8), (8, 9), (9, 10)]


async def test_prune_hits_the_ratio_and_keeps_rare_words_and_numbers(engine_tokenizer):
    text = ("the the the and and of of to to a a " * 10
            + "Zanzibar volcano erupted 1883 ") + ("the and of to a " * 10)
    scorer = UnigramScorer(engine_tokenizer)
    result = await prune_text(text, scorer, target_ratio=0.3)
    assert result.tokens_out <= 0.3 * result.tokens_in + 3
    for word in ("Zanzibar", "volcano", "1883"):
        assert word in result.text
    assert result.text.index("Zanzibar") < result.text.index("1883")  # original order
