"""Whole greedy answers on the kernel path this CPU runs (and, under `make test-lower-path`,
the one below it): the small version of bench/engine/answer_agreement.py.

Perplexity and per-token agreement read a reference text; an answer is the model reading
its own continuation, where one early difference sends the rest elsewhere. The questions are
those of the bench's held-out set on which transformers (bf16 and float32), the engine's AMX,
AVX-512 and fallback paths all hold the fact; bf16 logits of the LM head once made the
first one "L'Étoile, la Marseillaise, …" on the default path.
"""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

QUESTIONS = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Canada?", "Ottawa"),
    ("What is 2 + 2?", "4"),
    ("How many days are in a week?", "7"),
]


@pytest.fixture(scope="module")
def engine(smollm_bf16) -> LLMEngine:
    return LLMEngine(EngineConfig(num_kv_blocks=64, enable_prefix_caching=False),
                     loaded=tuple(smollm_bf16))


@pytest.mark.parametrize(("question", "fact"), QUESTIONS)
def test_greedy_answer_holds_the_fact(engine: LLMEngine, question: str, fact: str):
    tokenizer = engine.tokenizer
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user",
                                                              "content": question}]))
    out = engine.generate([prompt], SamplingParams(max_tokens=16, temperature=0.0))[0]
    answer = tokenizer.decode([t for t in out.token_ids if t not in engine.eos_token_ids])
    assert fact in answer, f"{question!r} -> {answer!r}"
