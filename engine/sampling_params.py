"""Per-request sampling parameters (the OpenAI knobs the engine honours)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import InvalidRequest

if TYPE_CHECKING:
    from engine.grammar.spec import GrammarSpec

MAX_STOP_STRINGS = 16
MAX_LOGPROBS = 20  # alternatives per token, as OpenAI's `top_logprobs`


@dataclass
class SamplingParams:
    """How to pick each next token and when to stop; `validate` names the bad field."""

    max_tokens: int = 256
    temperature: float = 1.0  # 0 -> greedy
    top_p: float = 1.0
    top_k: int = -1  # <= 0 disables
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None  # None: none; k: each token's and its k likeliest rivals'
    grammar: GrammarSpec | None = None  # the answer follows it (engine/grammar/): JSON mode,
    # a JSON schema, forced tool calls
    logit_bias: dict[int, float] = field(default_factory=dict)  # added to the token's logit

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def validate(self) -> None:
        """Raise InvalidRequest (a ValueError) whose `param` names the offending field."""
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequest("max_tokens must be an integer >= 1", param="max_tokens")
        if not 0.0 <= self.temperature <= 2.0:
            raise InvalidRequest("temperature must be between 0 and 2", param="temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequest("top_p must be in (0, 1]", param="top_p")
        if not isinstance(self.top_k, int):
            raise InvalidRequest("top_k must be an integer", param="top_k")
        if self.seed is not None and not isinstance(self.seed, int):
            raise InvalidRequest("seed must be an integer", param="seed")
        if len(self.stop) > MAX_STOP_STRINGS or any(not s for s in self.stop):
            raise InvalidRequest(f"stop takes up to {MAX_STOP_STRINGS} non-empty strings", param="stop")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise InvalidRequest("stop_token_ids must be token ids", param="stop_token_ids")
        if self.logprobs is not None and not (isinstance(self.logprobs, int)
                                              and 0 <= self.logprobs <= MAX_LOGPROBS):
            raise InvalidRequest(f"logprobs must be an integer in [0, {MAX_LOGPROBS}]",
                                 param="logprobs")
        if any(not isinstance(t, int) or t < 0 or not -100 <= b <= 100
               for t, b in self.logit_bias.items()):
            raise InvalidRequest("logit_bias maps token ids to biases from -100 to 100",
                                 param="logit_bias")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise InvalidRequest(f"{name} must be between -2 and 2", param=name)
