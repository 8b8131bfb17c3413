"""Build a `tokenizers` byte-level BPE tokenizer from a GGUF file's tokenizer metadata.

GGUF files carry no tokenizer.json: the vocabulary, merges, token types and the name of
llama.cpp's pre-tokenizer (`tokenizer.ggml.pre`) are metadata. The pre-tokenizer decides
how text is split before BPE, so it is mapped to the regex the model was trained with.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from engine.errors import ModelLoadError
from engine.tokenizer import Tokenizer

CONTROL, USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {"llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT,
           "smaug-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}


def _pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """llama.cpp's pre-tokenizer name -> the equivalent `tokenizers` pre-tokenizer."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _SPLITS:
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    # "gpt2", "smollm", ...: the gpt2 regex. SmolLM's vocabulary has no merges between ASCII
    # digits, so splitting digits apart first (as its tokenizer.json does) changes nothing,
    # while its merges of non-ASCII numerals ("Ġ½") show they were learned unsplit.
    return byte_level


def tokenizer_from_gguf(meta: dict[str, Any]) -> HFTokenizer:
    """A fast tokenizer equal to the checkpoint's own, control tokens matched whole."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(f"GGUF tokenizer {kind!r} is not supported (only byte-level BPE)")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {token: i for i, token in enumerate(tokens)}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre"))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types, strict=False) if kind == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind in zip(tokens, types, strict=False) if kind == USER_DEFINED])
    return tok


def tokenizer_from_gguf_metadata(meta: dict[str, Any]) -> Tokenizer:
    """The engine's `Tokenizer` (BPE, chat template, special tokens) from GGUF metadata."""
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        index = meta.get(key)
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    return Tokenizer(tokenizer_from_gguf(meta), meta.get("tokenizer.chat_template"),
                     bos_token=token("tokenizer.ggml.bos_token_id"),
                     eos_token=token("tokenizer.ggml.eos_token_id"),
                     add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)))
