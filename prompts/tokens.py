"""Token counting with the upstream's own tokenizer, chat-template overhead included.

- engine routes: the engine's tokenizer and chat template (exact: the prompt the engine sees);
- OpenAI-family models: tiktoken, with the encodings litellm ships inside its wheel (the
  files under `litellm/litellm_core_utils/tokenizers/`, named by the SHA-1 of their URL, the
  way tiktoken's cache names them) — nothing is ever fetched;
- any other provider: `litellm.token_counter`.

Counting runs on every request, so per-message counts are memoised by content.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from prompts.interfaces import Message, TokenCounter, message_text

_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_OPENAI_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-", "text-davinci", "davinci", "babbage")


def litellm_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None, "litellm is not installed"
    return Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"


@lru_cache(maxsize=8)
def bundled_encoding(name: str) -> Any:
    """A tiktoken `Encoding` read from litellm's bundled file; KeyError if it is not bundled."""
    folder = litellm_tokenizer_dir()
    cache_key = hashlib.sha1(_TIKTOKEN_URL.format(name).encode()).hexdigest()
    if not (folder / cache_key).is_file():
        raise KeyError(f"tiktoken encoding {name!r} is not bundled with litellm")
    # The same move litellm makes (litellm_core_utils/default_encoding.py): point tiktoken's
    # cache at the bundled folder, where the file is found under its cache key.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    import tiktoken

    return tiktoken.get_encoding(name)


def encoding_name_for(model: str) -> str:
    """o200k_base for the gpt-4o / o-series generation, cl100k_base for the rest."""
    base = model.split("/")[-1].lower()
    if base.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    return "cl100k_base"


def is_openai_family(model: str) -> bool:
    prefix, _, base = model.rpartition("/")
    if prefix and prefix not in ("openai", "azure"):
        return False
    return base.lower().startswith(_OPENAI_PREFIXES)


class EngineTokenCounter:
    """Exact counts for the bundled engine: its tokenizer over its chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def count_text(self, text: str) -> int:
        return _count_cached(self.tokenizer.encode, text)

    def count_messages(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                    tools=tools)
        return _count_cached(self.tokenizer.encode, prompt)


class TiktokenCounter:
    """OpenAI's counting rule: 3 tokens per message, +1 for a name, +3 to prime the reply."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoding = bundled_encoding(encoding_name_for(model))

    def count_text(self, text: str) -> int:
        return _count_cached(self._encode, text)

    def _encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, disallowed_special=())

    def count_messages(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        total = 3
        for m in messages:
            total += 3 + self.count_text(str(m.get("role", ""))) + self.count_text(message_text(m))
            if m.get("name"):
                total += 1 + self.count_text(m["name"])
            if m.get("tool_calls"):
                total += self.count_text(json.dumps(m["tool_calls"], sort_keys=True))
        if tools:
            total += self.count_text(json.dumps(tools, sort_keys=True))
        return total


class LitellmTokenCounter:
    """Other providers: litellm's counter (its own tokenizers, tiktoken as fallback)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def count_text(self, text: str) -> int:
        import litellm

        return int(litellm.token_counter(model=self.model, text=text))

    def count_messages(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        import litellm

        return int(litellm.token_counter(model=self.model, messages=messages, tools=tools))


def counter_for(kind: str, model: str, tokenizer: Any = None) -> TokenCounter:
    """The counter for an upstream of `kind` ("engine" | "openai" | "litellm") serving `model`."""
    if kind == "engine" and tokenizer is not None:
        return EngineTokenCounter(tokenizer)
    if is_openai_family(model):
        return TiktokenCounter(model)
    if kind == "openai":  # an OpenAI-compatible server of unknown make: cl100k is close enough
        return TiktokenCounter("gpt-4")
    return LitellmTokenCounter(model)


_memo: dict[tuple[int, str], int] = {}
_MEMO_MAX = 50_000


def _count_cached(encode: Any, text: str) -> int:
    """len(encode(text)), memoised: conversations resend the same turns every request."""
    if len(text) < 64:
        return len(encode(text))
    key = (id(encode.__self__) if hasattr(encode, "__self__") else id(encode), text)
    hit = _memo.get(key)
    if hit is None:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        hit = _memo[key] = len(encode(text))
    return hit
