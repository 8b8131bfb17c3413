"""One request's place in its grammar: what may come next, and the token that came."""

from __future__ import annotations

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np


class GrammarMatcher:
    """An llguidance matcher with what the mask needs to know about the vocabulary."""

    __slots__ = ("matcher", "vocab_size", "eos_ids")

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int,
                 eos_ids: list[int]) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.eos_ids = eos_ids

    def fill(self, bits: np.ndarray, row: int) -> None:
        """Write the allowed-token bits of the next step into row `row` of `bits`."""
        llg_numpy.fill_next_token_bitmask(self.matcher, bits, row)

    def consume(self, token_id: int) -> bool:
        """Take in the sampled token; False when the grammar refuses it (never after a mask)."""
        return self.matcher.consume_token(token_id)

    @property
    def finished(self) -> bool:
        """The grammar is complete and nothing but the end of text may follow."""
        return self.matcher.is_stopped()

    @property
    def error(self) -> str:
        return self.matcher.get_error()
