"""The pruning scorer: chunked scoring over its private KV cache equals one pass, and it can
run on the engine's step thread."""

from __future__ import annotations

import asyncio

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.token_scorer import EngineModelScorer

TEXT = ("The capital of France is Paris. Paris has many museums, and the Louvre is the largest. "
        "The capital of France is Paris.")


@pytest.fixture(scope="module")
def scorer(smollm_path) -> EngineModelScorer:
    return EngineModelScorer(smollm_path, window=64, dtype="float32")


async def test_chunked_scores_equal_one_pass(scorer: EngineModelScorer) -> None:
    ids = scorer.encode(TEXT)
    scorer.chunk = 1024
    whole = await scorer.token_logprobs(ids)
    scorer.chunk = 7  # chunks that end mid-block
    chunked = await scorer.token_logprobs(ids)
    assert len(whole) == len(chunked) == len(ids) and whole[0] == chunked[0] == 0.0
    assert max(abs(a - b) for a, b in zip(whole, chunked, strict=True)) < 1e-3
    assert sum(whole[-8:]) > sum(whole[1:9])  # the repeated sentence is predictable


async def test_window_caps_the_scored_tokens(scorer: EngineModelScorer) -> None:
    ids = scorer.encode(TEXT * 4)
    assert len(ids) > scorer.window
    assert len(await scorer.token_logprobs(ids)) == scorer.window


async def test_concurrent_texts_do_not_share_the_kv_cache(scorer: EngineModelScorer) -> None:
    a, b = scorer.encode(TEXT), scorer.encode("One two three four five six seven eight nine.")
    scorer.chunk = 5
    alone = [await scorer.token_logprobs(a), await scorer.token_logprobs(b)]
    together = await asyncio.gather(scorer.token_logprobs(a), scorer.token_logprobs(b))
    assert list(together) == alone


async def test_scoring_on_the_engine_step_thread(scorer: EngineModelScorer, smollm_fp32) -> None:
    engine = AsyncEngine(EngineConfig(dtype="float32", num_kv_blocks=32), loaded=tuple(smollm_fp32))
    try:
        ids = scorer.encode(TEXT)
        scorer.chunk = 16
        expected = await scorer.token_logprobs(ids)
        scorer.executor = engine.executor
        assert await scorer.token_logprobs(ids) == expected
    finally:
        scorer.executor = None
        await engine.shutdown()
