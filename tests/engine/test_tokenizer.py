"""The GGUF-built tokenizer against transformers' tokenizer for the same file, and the chat
template against transformers' `apply_chat_template`."""

from __future__ import annotations

import os

import pytest

from engine.errors import InvalidRequest
from engine.tokenizer import Tokenizer

TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "The year 2024 had 366 days; 3.14159 and 1,000,000 and -42.",
    "def f(x):\n\treturn x ** 2  # square\n\n\nprint(f(12))",
    "Ünïcödé: café, naïve, Straße, Ελληνικά, русский, 東京都, 한국어, العربية",
    "Emoji 🙂👍🏽🇫🇷 and symbols ©®™ ½ ² ³",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "I'm sure they'll say it's fine; we've DONE it, HE'LL see.",
    "tabs\tand\r\nwindows newlines\n\n\n  indented",
    "<|endoftext|><repo_name>x<file_sep>",
    "",
]


@pytest.fixture(scope="module")
def hf_tokenizer(smollm_path):
    from transformers import AutoTokenizer

    folder, name = os.path.split(smollm_path)
    return AutoTokenizer.from_pretrained(folder, gguf_file=name)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_transformers(smollm_tokenizer, hf_tokenizer, text):
    ids = smollm_tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=False)
    assert smollm_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_special_tokens_are_single_ids(smollm_tokenizer):
    tok = smollm_tokenizer
    assert tok.encode("<|im_start|>") == [1]
    assert tok.encode("<|im_end|>") == [2]
    assert tok.encode("<|endoftext|>") == [0]
    assert tok.decode([1, 28120, 2]) == tok.decode([28120])  # specials skipped by default
    assert 2 in tok.eos_token_ids
    assert tok.vocab_size == 49152


CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "Tell me a joke 🙂"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(smollm_tokenizer, hf_tokenizer, messages,
                                            add_generation_prompt):
    ours = smollm_tokenizer.apply_chat_template(messages, add_generation_prompt)
    theirs = hf_tokenizer.apply_chat_template(messages, tokenize=False,
                                              add_generation_prompt=add_generation_prompt)
    assert ours == theirs


def test_default_system_prompt_is_added(smollm_tokenizer):
    prompt = smollm_tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>assistant\n")


def test_tools_reach_the_template():
    template = ("{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
                "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import BPE

    tok = Tokenizer(HFTokenizer(BPE()), chat_template=template)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    out = tok.apply_chat_template([{"role": "user", "content": "Weather?"}], tools=tools)
    assert out.startswith('TOOLS:[{"type": "function", "function": {"name": "get_weather"')
    assert out.endswith("user: Weather?\n")


def test_template_errors_become_invalid_request():
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import BPE

    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    tok = Tokenizer(HFTokenizer(BPE()), chat_template=template)
    with pytest.raises(InvalidRequest) as info:
        tok.apply_chat_template([{"role": "assistant", "content": "x"}])
    assert info.value.param == "messages" and "user first" in str(info.value)


def test_template_is_sandboxed():
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import BPE

    tok = Tokenizer(HFTokenizer(BPE()), chat_template="{{ messages.__class__.__mro__ }}")
    with pytest.raises(Exception):  # noqa: B017 - jinja2's SecurityError or our InvalidRequest
        tok.apply_chat_template([])


def test_folder_tokenizer_equals_gguf_tokenizer(tmp_path, smollm_tokenizer, hf_tokenizer):
    hf_tokenizer.save_pretrained(tmp_path)
    tok = Tokenizer.from_folder(str(tmp_path))
    for text in TEXTS:
        assert tok.encode(text) == smollm_tokenizer.encode(text)
    messages = CONVERSATIONS[2]
    assert tok.apply_chat_template(messages) == smollm_tokenizer.apply_chat_template(messages)
    assert tok.eos_token_ids == smollm_tokenizer.eos_token_ids


def test_folder_bos_from_post_processor(tmp_path, smollm_tokenizer):
    """Llama 3 folders add BOS through tokenizer.json's post-processor, not the config flag."""
    import json

    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.processors import TemplateProcessing

    backend = HFTokenizer.from_str(smollm_tokenizer.backend.to_str())
    backend.post_processor = TemplateProcessing(single="<|im_start|> $A",
                                                special_tokens=[("<|im_start|>", 1)])
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    tok = Tokenizer.from_folder(str(tmp_path))
    assert tok.encode("hi", add_special_tokens=True) == [1, *smollm_tokenizer.encode("hi")]
    assert tok.encode("hi") == smollm_tokenizer.encode("hi")
    assert smollm_tokenizer.encode("hi", add_special_tokens=True) == smollm_tokenizer.encode("hi")


def test_token_bytes_spell_the_text_even_inside_a_character(smollm_tokenizer):
    text = "café ☕ 日本 <|im_end|>"
    ids = smollm_tokenizer.encode(text)
    pieces = [smollm_tokenizer.token_bytes(i) for i in ids]
    assert b"".join(pieces) == text.encode()
    assert any(not _whole_utf8(p) for p in pieces)  # some token holds part of a character


def _whole_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True
