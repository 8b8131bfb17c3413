"""A request's prompt size in tokens, estimated without a tokenizer (characters / 4, as
OpenAI estimates for its rate limits): cheap enough for every request's admission checks."""

from __future__ import annotations

import math

from openai_api import ChatCompletionRequest, CompletionRequest


def estimate_prompt_tokens(body: ChatCompletionRequest | CompletionRequest) -> int:
    """About how many tokens the prompt (all prompts of a batch) holds; token-id prompts
    are counted exactly."""
    if isinstance(body, ChatCompletionRequest):
        return max(1, math.ceil(sum(len(m.text()) for m in body.messages) / 4))
    return max(1, sum(math.ceil(len(p) / 4) if isinstance(p, str) else len(p)
                      for p in body.prompts()))
