"""When a sequence is done, and which of its text may be shown yet.

Stop strings can straddle deltas ("<|" in one token, "end|>" in the next), so text that
could be the start of a stop string is held back until it is clearly not; the stop
string itself is never emitted. Stop token ids (and EOS unless `ignore_eos`) end the
sequence without their text; `max_tokens` and the model's context end it with "length".
"""

from __future__ import annotations

from engine.sampling_params import SamplingParams


class StopChecker:
    """Per-sequence stop logic; `check_token` before the token's text, `feed_text` after."""

    def __init__(self, params: SamplingParams, eos_token_ids: list[int],
                 max_model_len: int) -> None:
        self.stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            self.stop_ids.update(eos_token_ids)
        self.stop_strings = list(params.stop)
        self.max_tokens = params.max_tokens
        self.max_model_len = max_model_len
        self.pending = ""  # text held back because it may begin a stop string

    def is_stop_token(self, token_id: int) -> bool:
        return token_id in self.stop_ids

    def length_reached(self, num_output_tokens: int, num_tokens: int) -> bool:
        return num_output_tokens >= self.max_tokens or num_tokens >= self.max_model_len

    def feed_text(self, new_text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was reached)."""
        if not self.stop_strings:
            return new_text, False
        text = self.pending + new_text
        hits = [i for i in (text.find(s) for s in self.stop_strings) if i >= 0]
        if hits:
            self.pending = ""
            return text[:min(hits)], True
        hold = self._held_suffix_len(text)
        self.pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold], False

    def flush(self) -> str:
        """The held-back text, released when the sequence ends for another reason."""
        text, self.pending = self.pending, ""
        return text

    def _held_suffix_len(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        longest = max(len(s) for s in self.stop_strings) - 1
        for k in range(min(longest, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stop_strings):
                return k
        return 0
