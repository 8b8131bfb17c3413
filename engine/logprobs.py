"""Log-probabilities of sampled tokens: from the sampler's numbers (`Sequence.sampled_logprobs`)
to text (`TokenLogprobs`), then to OpenAI's two shapes.

Chat answers carry `{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}` per
choice; legacy completions `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`,
the offsets counted in characters of the choice's text (an echoed prompt included). A
token that holds part of a character shows as its decoded text with U+FFFD, and exactly as
its `bytes`.
"""

from __future__ import annotations

from engine.outputs import TokenLogprobs
from engine.tokenizer import Tokenizer
from openai_api import ChoiceLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob


def render(tokenizer: Tokenizer, token_id: int, logprob: float,
           top: list[tuple[int, float]]) -> TokenLogprobs:
    """A sampled token's numbers as text."""

    def piece(tid: int) -> tuple[str, bytes]:
        raw = tokenizer.token_bytes(tid)
        return raw.decode("utf-8", "replace"), raw

    text, raw = piece(token_id)
    return TokenLogprobs(text, raw, logprob, [(*piece(tid), lp) for tid, lp in top])


def chat_logprobs(tokens: list[TokenLogprobs]) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=[
        TokenLogprob(token=t.token, logprob=t.logprob, bytes=list(t.token_bytes),
                     top_logprobs=[TopLogprob(token=text, logprob=lp, bytes=list(raw))
                                   for text, raw, lp in t.top])
        for t in tokens])


def completion_logprobs(tokens: list[TokenLogprobs], offset: int) -> CompletionLogprobs:
    """The legacy shape for `tokens`, the first of them at character `offset` of the text."""
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return CompletionLogprobs(
        tokens=[t.token for t in tokens], token_logprobs=[t.logprob for t in tokens],
        top_logprobs=[{text: lp for text, _, lp in t.top} for t in tokens], text_offset=offsets)
