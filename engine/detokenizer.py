"""Turn a stream of token ids into text deltas that never split a UTF-8 character.

Byte-level BPE tokens can end in the middle of a multi-byte character (emoji, CJK). Each
new id is decoded together with a few previous ones; text is released only once it no
longer ends in the replacement character, so the deltas concatenate to the full decode.
"""

from __future__ import annotations

from engine.tokenizer import Tokenizer

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Feed ids one at a time with `add`; `flush` returns whatever was held back at the end."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self.text = ""
        self._prefix_offset = 0  # start of the window decoded for context
        self._read_offset = 0  # ids before this are already in `text`

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token_id: int) -> str:
        """The new text this id completes ("" while a character is still incomplete)."""
        self.token_ids.append(token_id)
        return self._advance(final=False)

    def add_many(self, token_ids: list[int]) -> str:
        return "".join(self.add(t) for t in token_ids)

    def flush(self) -> str:
        """Release held-back text at the end of a generation, even if it is broken."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        prefix = self._decode(self.token_ids[self._prefix_offset:self._read_offset])
        full = self._decode(self.token_ids[self._prefix_offset:])
        if not final and (len(full) <= len(prefix) or full.endswith(REPLACEMENT)):
            return ""  # nothing new yet, or a character is still incomplete
        delta = full[len(prefix):]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.token_ids)
        self.text += delta
        return delta
