"""LLMEngine with the real SmolLM2 model (fp32 for exact comparisons)."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
QUESTIONS = ["What is the capital of France?", "Name three primary colours.",
             "Write a haiku about the sea.", "How many legs does a spider have?"]


def make_engine(loaded, **overrides) -> LLMEngine:
    options = {"dtype": "float32", "num_kv_blocks": 96, "max_num_batched_tokens": 256}
    options.update(overrides)
    return LLMEngine(EngineConfig(**options), loaded=tuple(loaded))


def chat(tokenizer, *turns: str) -> str:
    roles = ["user", "assistant"] * len(turns)
    messages = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]
    return tokenizer.apply_chat_template(messages)


@pytest.fixture(scope="module")
def engine(smollm_fp32) -> LLMEngine:
    return make_engine(smollm_fp32)


@pytest.fixture(scope="module")
def reference(smollm_fp32) -> list[list[int]]:
    """Greedy tokens of each question run alone, prefix caching off, one-shot prefill."""
    plain = make_engine(smollm_fp32, enable_prefix_caching=False)
    prompts = [chat(plain.tokenizer, q) for q in QUESTIONS]
    return [plain.generate([p], GREEDY)[0].token_ids for p in prompts]


def test_batch_equals_alone(engine: LLMEngine, reference: list[list[int]]) -> None:
    prompts = [chat(engine.tokenizer, q) for q in QUESTIONS]
    outputs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outputs] == reference
    assert all(o.finish_reason == "length" and len(o.token_ids) == 12 for o in outputs)
    assert engine.kv.stats().used == 0


def test_prefix_cache_hit_equals_cold(engine: LLMEngine, reference: list[list[int]]) -> None:
    prompt = chat(engine.tokenizer, QUESTIONS[0])
    engine.generate([prompt], GREEDY)  # warm
    warm = engine.generate([prompt], GREEDY)[0]
    assert warm.cached_tokens >= 16 and warm.cached_tokens < warm.prompt_tokens
    assert warm.token_ids == reference[0]


def test_chunked_prefill_equals_one_shot(smollm_fp32, reference: list[list[int]]) -> None:
    tiny = make_engine(smollm_fp32, max_num_batched_tokens=8, max_num_seqs=4,
                       enable_prefix_caching=False)
    prompts = [chat(tiny.tokenizer, q) for q in QUESTIONS[:2]]
    assert min(len(tiny.tokenizer.encode(p)) for p in prompts) > 3 * 8  # really chunked
    assert [o.token_ids for o in tiny.generate(prompts, GREEDY)] == reference[:2]


def test_preemption_still_gives_the_same_answers(smollm_fp32, reference) -> None:
    # 6 blocks of 16: two ~38-token prompts fit, but not once both grow past 48 tokens.
    small = make_engine(smollm_fp32, num_kv_blocks=6, enable_prefix_caching=False)
    order = [2, 3, 0]
    outputs = small.generate([chat(small.tokenizer, QUESTIONS[i]) for i in order], GREEDY)
    assert [o.token_ids for o in outputs] == [reference[i] for i in order]
    assert small.scheduler.num_preemptions > 0
    assert small.kv.stats().used == 0


def test_second_turn_reuses_the_first(engine: LLMEngine) -> None:
    tok = engine.tokenizer
    params = SamplingParams(temperature=0, max_tokens=40)
    first = engine.generate([chat(tok, "Tell me about the moon.")], params)[0]
    second_prompt = chat(tok, "Tell me about the moon.", first.text, "And the sun?")
    second = engine.generate([second_prompt], params)[0]
    first_prompt_len = len(tok.encode(chat(tok, "Tell me about the moon.")))
    # More than the first prompt: blocks filled by the generated answer are reused too.
    assert second.cached_tokens > first_prompt_len
    assert engine.stats().cached_tokens_total >= second.cached_tokens


def test_stop_string_is_cut_and_never_emitted(engine: LLMEngine, reference) -> None:
    prompt = chat(engine.tokenizer, QUESTIONS[0])
    full = engine.tokenizer.decode(reference[0])
    assert "Paris" in full
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=12,
                                                   stop=["Paris"]))[0]
    assert out.finish_reason == "stop"
    assert out.text == full[:full.index("Paris")]


def test_eos_and_stop_token_ids_finish_with_stop(engine: LLMEngine, reference) -> None:
    prompt = chat(engine.tokenizer, QUESTIONS[0])
    natural = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=64))[0]
    assert natural.finish_reason == "stop"
    assert natural.token_ids[-1] in engine.eos_token_ids
    third = reference[0][2]
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=12,
                                                   stop_token_ids=[third]))[0]
    assert out.finish_reason == "stop" and out.token_ids == reference[0][:3]
    assert out.text == engine.tokenizer.decode(reference[0][:2])


def test_seeded_sampling_is_reproducible_in_any_batch(engine: LLMEngine) -> None:
    prompts = [chat(engine.tokenizer, q) for q in QUESTIONS]
    seeded = SamplingParams(temperature=1.0, max_tokens=12, seed=1234, ignore_eos=True)
    others = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True)
    alone = engine.generate([prompts[2]], seeded)[0].token_ids
    batched = engine.generate(prompts, [others, others, seeded, others])[2].token_ids
    assert batched == alone
    other_seed = SamplingParams(temperature=1.0, max_tokens=12, seed=99, ignore_eos=True)
    assert engine.generate([prompts[2]], other_seed)[0].token_ids != alone


def test_validation_names_the_parameter(engine: LLMEngine) -> None:
    with pytest.raises(InvalidRequest) as too_long:
        engine.add_request([1] * engine.max_model_len, GREEDY)
    assert too_long.value.param == "prompt"
    with pytest.raises(InvalidRequest) as bad:
        engine.add_request("hi", SamplingParams(temperature=-1))
    assert bad.value.param == "temperature"
    with pytest.raises(InvalidRequest):
        engine.add_request([engine.model_config.vocab_size], GREEDY)
    assert not engine.has_unfinished()


def test_session_blocks_survive_pressure(smollm_fp32) -> None:
    def run(session_id: str | None) -> int:
        eng = make_engine(smollm_fp32, num_kv_blocks=16, session_idle_s=600)
        tok = eng.tokenizer
        params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        doc = "Notes: " + " ".join(f"item {i} is blue." for i in range(20))
        eng.add_request(chat(tok, doc), params, session_id=session_id)
        while eng.has_unfinished():
            eng.step()
        for i in range(4):  # other traffic that needs most of the pool
            eng.generate([chat(tok, f"Question {i}: " + "why is the sky blue? " * 8)], params)
        eng.add_request(chat(tok, doc) + "ok", params, session_id=session_id)
        hits = 0
        while eng.has_unfinished():
            for delta in eng.step():
                hits = delta.cached_tokens
        return hits

    plain, kept = run(session_id=None), run(session_id="chat-7")
    assert plain <= 32  # at most the shared system prompt: the rest was evicted (LRU)
    assert kept >= 128  # the whole document was kept for its session
