"""What the bundled engine refuses in an OpenAI request, so that every parameter it accepts
is honoured: a field it would otherwise drop in silence is a 400 that names it.

- content parts it cannot read (images, audio, files: the model reads text) are refused
  with the part's place, `messages[0].content[1]`;
- fields it does not implement (OpenAI's `audio`, `reasoning_effort`, the legacy
  `functions`; vLLM's `min_p`, `guided_json`, ...) and fields it does not know are refused
  as OpenAI refuses them ("Unrecognized request argument"); `tools` and `tool_choice` are
  read by `engine/serving/tool_choice.py`;
- `logit_bias` is validated as OpenAI does (token ids of the vocabulary, values in
  [-100, 100]) and then applied by the sampler.
"""

from __future__ import annotations

from typing import Any

from openai_api import APIError, ChatMessage, SamplingFields

MAX_LOGIT_BIAS = 1024  # entries per request
# Fields the engine takes without acting on them: accounting and hints that change no answer.
NO_EFFECT_FIELDS = frozenset({"user", "store", "metadata", "service_tier", "prediction"})
# Extras that the engine honours: vLLM's (read by engine/serving/inputs.py, and
# `kv_transfer_params` by engine/serving/kv_transfer.py) and OpenAI's `parallel_tool_calls`
# (engine/serving/tool_choice.py).
HONOURED_EXTRAS = frozenset({"ignore_eos", "stop_token_ids", "parallel_tool_calls",
                             "kv_transfer_params"})
TEXT_PART_TYPES = frozenset({"text", "input_text"})


def check_content_parts(messages: list[ChatMessage]) -> None:
    """400 for a content part that is not text, naming it (`messages[i].content[j]`)."""
    for i, message in enumerate(messages):
        if not isinstance(message.content, list):
            continue
        for j, part in enumerate(message.content):
            where = f"messages[{i}].content[{j}]"
            kind = part.get("type")
            if kind not in TEXT_PART_TYPES:
                what = f"of type {kind!r}" if isinstance(kind, str) else "without a type"
                raise APIError(400, f"{where}: a content part {what} cannot be read by this "
                               "model, which reads text only", param=where,
                               code="unsupported_content")
            if not isinstance(part.get("text"), str):
                raise APIError(400, f"{where}.text must be a string", param=f"{where}.text")


def check_fields(request: SamplingFields) -> None:
    """400 for a field the engine would not honour."""
    for name, value in (request.model_extra or {}).items():
        if name in NO_EFFECT_FIELDS or name in HONOURED_EXTRAS or value is None:
            continue
        if name == "modalities" and value == ["text"]:
            continue
        if name == "best_of" and value in (1, request.n):
            continue
        raise APIError(400, f"Unrecognized request argument supplied: {name}", param=name,
                       code="unsupported_parameter")


def logit_bias(value: Any, vocab_size: int) -> dict[int, float]:
    """`logit_bias` as token id -> bias, validated as OpenAI does."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise APIError(400, "logit_bias must be an object mapping token ids to biases",
                       param="logit_bias")
    if len(value) > MAX_LOGIT_BIAS:
        raise APIError(400, f"logit_bias takes at most {MAX_LOGIT_BIAS} tokens",
                       param="logit_bias")
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except ValueError:
            token = -1
        if str(token) != key.strip() or not 0 <= token < vocab_size:
            raise APIError(400, f"logit_bias: {key!r} is not a token id of this model "
                           f"(0 to {vocab_size - 1})", param="logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, int | float) \
                or not -100 <= bias <= 100:
            raise APIError(400, f"logit_bias[{key!r}] must be a number from -100 to 100",
                           param="logit_bias")
        out[token] = float(bias)
    return out
