"""Each step, before sampling: the logits of every sequence with a grammar keep only the
tokens its matcher allows; the other rows of the batch are untouched.

llguidance writes one bit per token (`[rows, ceil(vocab / 32)]` int32 words); numpy unpacks
them to one byte per token, which torch reads in place as a bool mask, and one masked fill
sets the refused tokens to -inf (a copy of the logits; the model's own stay for the
log-probabilities). Greedy and sampled rows alike then pick among what is left (a seeded
request's draw stays its own). Columns past the tokenizer's vocabulary (a model's padded
LM head) are never allowed. A matcher in an error state allows nothing; its row then
allows only the end of text, so the request ends rather than sampling garbage.

Cost at batch 8 on SmolLM2's 49,152 tokens: ~0.3 ms a step (bench/engine/structured_bench.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import llguidance.numpy as llg_numpy
import numpy as np
import torch
from torch import Tensor

from engine.grammar.matcher import GrammarMatcher

log = logging.getLogger(__name__)


def allowed_bits(grammars: list[GrammarMatcher]) -> np.ndarray:
    """int32 [len(grammars), words]: bit t of a row is set when its grammar allows token t
    next; a row that allows nothing gets its end-of-text tokens."""
    bits = llg_numpy.allocate_token_bitmask(len(grammars), grammars[0].vocab_size)
    for k, grammar in enumerate(grammars):
        grammar.fill(bits, k)
    for k in np.flatnonzero(~bits.any(axis=1)):
        grammar = grammars[k]
        log.warning("grammar: a request has no token left (%s); ending it",
                    grammar.error or "nothing may follow")
        words = bits.view(np.uint32)
        for eos in grammar.eos_ids:
            words[k, eos // 32] |= np.uint32(1 << (eos % 32))
    return bits


def apply_grammar_masks(logits: Tensor, grammars: Sequence[GrammarMatcher | None]) -> Tensor:
    """`logits` [N, width], one row per sequence, with each constrained row's refused tokens
    at -inf: a new tensor when a row has a grammar, `logits` itself when none has."""
    rows = [row for row, grammar in enumerate(grammars) if grammar is not None]
    if not rows:
        return logits
    constrained = [grammars[row] for row in rows]
    bits = allowed_bits(constrained)  # type: ignore[arg-type]
    width = logits.shape[-1]
    vocab = min(width, bits.shape[1] * 32, constrained[0].vocab_size)  # type: ignore[union-attr]
    unpacked = np.unpackbits(bits.view(np.uint8), axis=1, count=vocab, bitorder="little")
    refused = torch.from_numpy(unpacked).view(torch.bool).logical_not_().to(logits.device)
    if vocab < width:  # a padded LM head: the extra columns are never text
        refused = torch.nn.functional.pad(refused, (0, width - vocab), value=True)
    if len(rows) == len(grammars):
        return logits.masked_fill(refused, float("-inf"))
    out = logits.clone()
    index = torch.tensor(rows, device=logits.device)
    out[index] = logits[index].masked_fill(refused, float("-inf"))
    return out
