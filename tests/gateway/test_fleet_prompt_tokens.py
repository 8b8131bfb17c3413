"""The picker's view of a prompt: the very token ids the engine computes (chat template,
tokenizer), pieces between added tokens served from memory, and block keys with the salt."""

from __future__ import annotations

from engine import load_tokenizer
from engine.serving.inputs import chat_input, completion_input
from gateway.fleet.block_keys import block_keys, salt_extra
from gateway.fleet.prompt_tokens import PromptTokens
from openai_api import ChatCompletionRequest, CompletionRequest

TOK = load_tokenizer(None)


def chat(*turns: str, **extra) -> ChatCompletionRequest:
    roles = ["system"] + ["user", "assistant"] * len(turns)
    messages = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]
    return ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **extra})


def test_chat_prompts_tokenize_exactly_as_the_engine_does() -> None:
    prompts = PromptTokens(TOK, 16)
    assert prompts._split is not None  # SmolLM2's added tokens leave their neighbours alone
    for request in (chat("Be brief.", "Hi  there,\n\nfriend"),
                    chat("Be brief.", "Hi  there,\n\nfriend", "  Hello!\t", "again <odd> ü"),
                    chat("Sé breve. 日本語", "<|im_start|> inside text?")):
        expected = chat_input(request, TOK, 8192).prompts[0].ids
        assert prompts.token_ids(request) == expected
        assert prompts.token_ids(request) == expected  # the second time from memory


def test_completion_prompts_add_the_bos_as_the_engine_does() -> None:
    prompts = PromptTokens(TOK, 16)
    for body in ({"prompt": "Once upon a time"}, {"prompt": [5, 6, 7]},
                 {"prompt": ["first prompt", "second"]}):
        request = CompletionRequest.model_validate({"model": "m", **body})
        assert prompts.token_ids(request) == completion_input(request, TOK, 8192).prompts[0].ids


def test_keys_cover_full_blocks_and_carry_the_cache_salt() -> None:
    prompts = PromptTokens(TOK, 16)
    request = chat("You are a tide table. " * 20, "High tide?")
    ids = prompts.token_ids(request)
    keys, count = prompts.keys(request)
    assert count == len(ids) and keys == block_keys(ids, 16) and len(keys) == len(ids) // 16
    salted, _ = prompts.keys(request, "team-a")
    assert salted == block_keys(ids, 16, salt_extra("team-a")) and set(salted).isdisjoint(keys)


def test_pieces_are_forgotten_least_recently_used_first() -> None:
    prompts = PromptTokens(TOK, 16, max_pieces=3)
    prompts.encode("one<|im_end|>two")  # pieces: one, <|im_end|>, two
    prompts.encode("one")  # touched
    prompts.encode("three")  # over the bound: the oldest untouched piece goes
    assert list(prompts._pieces) == ["two", "one", "three"]
