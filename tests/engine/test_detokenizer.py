"""IncrementalDetokenizer: deltas never carry broken UTF-8 and add up to the full decode."""

from __future__ import annotations

import pytest

from engine.detokenizer import REPLACEMENT, IncrementalDetokenizer

TEXTS = [
    "plain ascii text, nothing special",
    "Emoji 🙂👍🏽🇫🇷 split across byte tokens",
    "CJK 東京都は日本の首都です。한국어도 있어요.",
    "Math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and accents: café naïve Straße",
]


def stream(tokenizer, ids: list[int], **kwargs) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer, **kwargs)
    return [detok.add(i) for i in ids] + [detok.flush()]


@pytest.mark.parametrize("text", TEXTS)
def test_deltas_are_whole_characters_and_sum_to_decode(smollm_tokenizer, text):
    ids = smollm_tokenizer.encode(text)
    deltas = stream(smollm_tokenizer, ids)
    assert all(REPLACEMENT not in d for d in deltas)
    assert "".join(deltas) == smollm_tokenizer.decode(ids) == text


def test_multibyte_character_is_held_back_until_complete(smollm_tokenizer):
    ids = smollm_tokenizer.encode("🙂")
    assert len(ids) > 1  # the emoji takes several byte tokens
    deltas = stream(smollm_tokenizer, ids)
    assert deltas[:-2] == [""] * (len(ids) - 1)
    assert deltas[-2] == "🙂"


def test_special_tokens_skipped_or_kept(smollm_tokenizer):
    ids = smollm_tokenizer.encode("Hi<|im_end|> there")
    assert "".join(stream(smollm_tokenizer, ids)) == "Hi there"
    kept = stream(smollm_tokenizer, ids, skip_special_tokens=False)
    assert "".join(kept) == "Hi<|im_end|> there"


def test_flush_releases_a_truncated_character(smollm_tokenizer):
    thumbs = smollm_tokenizer.encode("👍")
    assert len(thumbs) > 1
    ids = smollm_tokenizer.encode("ok") + thumbs[:-1]  # cut inside the emoji's bytes
    deltas = stream(smollm_tokenizer, ids)
    assert "".join(deltas[:-1]) == "ok"
    assert deltas[-1].startswith(REPLACEMENT)
