"""A request's prompt as a replica will see it: its token ids and block keys.

The picker scores replicas on the blocks of the prompt the engine computes, which is the
request after the gateway's transforms rendered through the model's chat template and
tokenizer, exactly as `engine/serving/inputs.py` does it for the bundled engine. The
tokenizer is the fleet's model's (`tokenizer:` on the upstream, a .gguf file or a Hugging
Face folder; default the bundled SmolLM2), read without its weights.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from engine import Tokenizer, chat_prompt
from gateway.fleet.block_keys import block_keys, salt_extra
from openai_api import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("headstart.gateway")
MAX_CACHED_PIECES = 8192


class PromptTokens:
    """Token ids and block keys of requests, for one fleet's model.

    Tokenizing a long prompt costs about a millisecond on the event loop, and most of a
    prompt (the system prompt, earlier turns) was seen before. A tokenizer splits its text
    at its added tokens (`<|im_start|>`, ...) before anything else, so the pieces between
    them tokenize alone to the same ids: each piece's ids are kept (least recently used
    out), and only new pieces are tokenized. A tokenizer whose added tokens strip or
    normalise their neighbours is used whole."""

    def __init__(self, tokenizer: Tokenizer, block_size: int,
                 max_pieces: int = MAX_CACHED_PIECES) -> None:
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.max_pieces = max_pieces
        self._pieces: OrderedDict[str, list[int]] = OrderedDict()
        self._split = _added_token_splitter(tokenizer)

    def encode(self, text: str) -> list[int]:
        """`tokenizer.encode(text)`, from the ids of pieces seen before where it can."""
        if self._split is None:
            return self.tokenizer.encode(text)
        ids: list[int] = []
        pieces = self._pieces
        for piece in self._split(text):
            if not piece:
                continue
            found = pieces.get(piece)
            if found is None:
                found = pieces[piece] = self.tokenizer.encode(piece)
                if len(pieces) > self.max_pieces:
                    pieces.popitem(last=False)
            else:
                pieces.move_to_end(piece)
            ids += found
        return ids

    def token_ids(self, request: ChatCompletionRequest | CompletionRequest) -> list[int]:
        """The prompt's token ids (a batch of prompts: the first); [] when the template
        rejects the request (the replica will answer it with its own error)."""
        try:
            if isinstance(request, ChatCompletionRequest):
                return self.encode(chat_prompt(request, self.tokenizer))
            prompt: Any = request.prompts()[0]
            if not isinstance(prompt, str):
                return list(prompt)
            ids = self.encode(prompt)
            tok = self.tokenizer
            if tok.add_bos_token and ids[:1] != [tok.bos_token_id]:  # as Tokenizer.encode
                ids = [tok.bos_token_id, *ids]
            return ids
        except Exception:  # noqa: BLE001 - scoring is best effort; the replica decides
            log.debug("cannot tokenize a request for the picker", exc_info=True)
            return []

    def keys(self, request: ChatCompletionRequest | CompletionRequest,
             cache_salt: str | None = None) -> tuple[list[int], int]:
        """(block keys of the prompt's full blocks, its token count). `cache_salt`: the one
        the request goes upstream with (`RequestContext.cache_salt`, the gateway's or the
        client's), which partitions the replica's prefix cache."""
        ids = self.token_ids(request)
        return block_keys(ids, self.block_size, salt_extra(cache_salt)), len(ids)


def _added_token_splitter(tokenizer: Tokenizer) -> Callable[[str], list[str]] | None:
    """`re.split` at the tokenizer's added tokens (kept as pieces), or None when one of them
    changes its neighbours (strips or normalises) or a sample disagrees with a whole encode."""
    added = list(tokenizer.backend.get_added_tokens_decoder().values())
    if not added or any(t.lstrip or t.rstrip or t.normalized or t.single_word for t in added):
        return None
    names = sorted((t.content for t in added), key=len, reverse=True)
    split = re.compile("(" + "|".join(re.escape(n) for n in names) + ")").split
    sample = "".join(f"{n} x{n}\n y {n}" for n in names[:4]) + " tail  end"
    pieces = [i for p in split(sample) if p for i in tokenizer.encode(p)]
    return split if pieces == tokenizer.encode(sample) else None
