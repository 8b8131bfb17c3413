"""The engine's tokenizer: a fast `tokenizers` BPE plus the checkpoint's chat template.

Built from GGUF metadata (`engine.weights.gguf_tokenizer.tokenizer_from_gguf_metadata`) or
from a Hugging Face folder
(`tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja`). The chat template runs
in a sandboxed jinja2 environment with the same options Hugging Face uses, so prompts
match `apply_chat_template` exactly.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer

from engine.errors import InvalidRequest, ModelLoadError

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eom_id|>")


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte: printable Latin-1 bytes stand for
    themselves, the other bytes for the characters from U+0100 on, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable},
            **{chr(0x100 + i): b for i, b in enumerate(others)}}


_BYTE_OF_CHAR = _byte_level_alphabet()


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators,
                      sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class Tokenizer:
    """encode/decode ids and render chat prompts; `eos_token_ids` end a generation."""

    def __init__(self, backend: HFTokenizer, chat_template: str | None = None,
                 bos_token: str | None = None, eos_token: str | None = None,
                 add_bos_token: bool = False, extra_eos_ids: list[int] | None = None) -> None:
        self.backend = backend
        self.bos_token, self.eos_token = bos_token, eos_token
        self.bos_token_id = self.token_to_id(bos_token)
        self.eos_token_id = self.token_to_id(eos_token)
        self.add_bos_token = add_bos_token and self.bos_token_id is not None
        self.chat_template = chat_template or CHATML_TEMPLATE
        self._template = _environment().from_string(self.chat_template)
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        ids = [self.eos_token_id, *(extra_eos_ids or [])]
        ids += [self.token_to_id(t) for t in END_OF_TURN_TOKENS if t in self.chat_template]
        self.eos_token_ids: list[int] = list(dict.fromkeys(i for i in ids if i is not None))

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for. A byte-level BPE token (GPT-2's alphabet: one
        printable character per byte) may hold part of a character, which `decode` would
        turn into U+FFFD; others are their own text."""
        piece = self.id_to_token(token_id) or ""
        if all(ch in _BYTE_OF_CHAR for ch in piece):
            return bytes(_BYTE_OF_CHAR[ch] for ch in piece)
        return self.decode([token_id], skip_special_tokens=False).encode()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and ids[:1] != [self.bos_token_id]:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, **kwargs: Any) -> str:
        """The prompt text for `messages`; InvalidRequest when the template rejects them."""
        try:
            return self._template.render(
                messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "", **kwargs)
        except (TemplateError, TypeError, KeyError) as exc:
            raise InvalidRequest(f"chat template rejected the messages: {exc}", "messages") from exc

    @classmethod
    def from_folder(cls, folder: str, extra_eos_ids: list[int] | None = None) -> Tokenizer:
        """From a Hugging Face folder: tokenizer.json + tokenizer_config.json (+ template file)."""
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.exists(path):
            raise ModelLoadError(f"no tokenizer.json in {folder!r}")
        config: dict[str, Any] = {}
        config_path = os.path.join(folder, "tokenizer_config.json")
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: use the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        template_path = os.path.join(folder, "chat_template.jinja")
        if template is None and os.path.exists(template_path):
            with open(template_path, encoding="utf-8") as f:
                template = f.read()

        def special(name: str) -> str | None:
            value = config.get(name)
            return value.get("content") if isinstance(value, dict) else value

        backend = HFTokenizer.from_file(path)
        bos = special("bos_token")
        add_bos = config.get("add_bos_token")
        if add_bos is None:  # Llama 3 says it through tokenizer.json's post-processor instead
            bos_id = backend.token_to_id(bos) if bos else None
            add_bos = bos_id is not None and backend.encode("a").ids[:1] == [bos_id]
        return cls(backend, template, bos_token=bos, eos_token=special("eos_token"),
                   add_bos_token=bool(add_bos), extra_eos_ids=extra_eos_ids)
