"""A request's prompt as a replica will see it: its token ids and block keys.

The picker scores replicas on the blocks of the prompt the engine computes, which is the
request after the gateway's transforms rendered through the model's chat template and
tokenizer, exactly as `engine/openai_adapter.py` does it for the bundled engine. The
tokenizer is the fleet's model's (`tokenizer:` on the upstream, a .gguf file or a Hugging
Face folder; default the bundled SmolLM2), read without its weights.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from engine.openai_adapter import chat_prompt
from engine.protocol import ChatCompletionRequest, CompletionRequest
from engine.tokenizer import Tokenizer
from engine.weights import default_model_path
from engine.weights.gguf_loader import GGUFCheckpoint
from gateway.fleet.block_keys import block_keys, salt_extra

log = logging.getLogger("headstart.gateway")


@functools.cache
def load_tokenizer(path: str | None) -> Tokenizer:
    """The tokenizer and chat template of the model at `path` (blocking; no weights read;
    read once per process: every fleet upstream of one model shares it)."""
    path = path or default_model_path()
    if os.path.isdir(path):
        return Tokenizer.from_folder(path)
    return Tokenizer.from_gguf_metadata(GGUFCheckpoint(path).metadata)


def cache_salt(request: ChatCompletionRequest | CompletionRequest) -> str | None:
    """vLLM's `cache_salt` request field: the replica's prefix cache is partitioned by it."""
    salt = (request.model_extra or {}).get("cache_salt")
    return salt if isinstance(salt, str) and salt else None


class PromptTokens:
    """Token ids and block keys of requests, for one fleet's model."""

    def __init__(self, tokenizer: Tokenizer, block_size: int) -> None:
        self.tokenizer = tokenizer
        self.block_size = block_size

    def token_ids(self, request: ChatCompletionRequest | CompletionRequest) -> list[int]:
        """The prompt's token ids (a batch of prompts: the first); [] when the template
        rejects the request (the replica will answer it with its own error)."""
        try:
            if isinstance(request, ChatCompletionRequest):
                return self.tokenizer.encode(chat_prompt(request, self.tokenizer))
            prompt: Any = request.prompts()[0]
            if isinstance(prompt, str):
                return self.tokenizer.encode(prompt, add_special_tokens=True)
            return list(prompt)
        except Exception:  # noqa: BLE001 - scoring is best effort; the replica decides
            log.debug("cannot tokenize a request for the picker", exc_info=True)
            return []

    def keys(self, request: ChatCompletionRequest | CompletionRequest) -> tuple[list[int], int]:
        """(block keys of the prompt's full blocks, its token count)."""
        ids = self.token_ids(request)
        return block_keys(ids, self.block_size, salt_extra(cache_salt(request))), len(ids)
