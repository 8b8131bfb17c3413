"""AsyncEngine with the real model: concurrent streams, cancellation, validation, failures."""

from __future__ import annotations

import asyncio

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.outputs import GenerationDelta
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
LONG = SamplingParams(temperature=0, max_tokens=500, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(smollm_fp32):
    eng = AsyncEngine(EngineConfig(dtype="float32", num_kv_blocks=64), loaded=tuple(smollm_fp32))
    yield eng
    asyncio.run(eng.shutdown())


def prompt(engine: AsyncEngine, question: str) -> str:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": question}])


async def collect(engine: AsyncEngine, text: str, params=GREEDY, **kw) -> list[GenerationDelta]:
    return [d async for d in engine.generate(text, params, **kw)]


async def wait_until_idle(engine: AsyncEngine) -> None:
    for _ in range(200):
        stats = engine.stats()
        if stats.kv_blocks_used == 0 and stats.num_running == 0 and stats.num_waiting == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"engine still busy: {engine.stats()}")


async def test_concurrent_streams_match_sequential(engine: AsyncEngine) -> None:
    questions = ["What is 2 + 2?", "Name a fruit.", "Say hello."]
    alone = [await collect(engine, prompt(engine, q)) for q in questions]
    together = await asyncio.gather(*(collect(engine, prompt(engine, q)) for q in questions))
    for a, b in zip(alone, together, strict=True):
        assert [t for d in a for t in d.token_ids] == [t for d in b for t in d.token_ids]
        assert "".join(d.text for d in a) == "".join(d.text for d in b)
    first, last = together[0][0], together[0][-1]
    assert first.ttft_s is not None and first.queue_time_s is not None
    assert first.ttft_s >= first.queue_time_s >= 0
    assert last.finish_reason == "length" and last.completion_tokens == 10
    assert all(d.finish_reason is None for d in together[0][:-1])
    assert together[0][0].cached_tokens > 0  # the alone run left the prompt in the cache
    await wait_until_idle(engine)


async def test_closing_the_stream_aborts_and_frees_blocks(engine: AsyncEngine) -> None:
    stream = engine.generate(prompt(engine, "Count to one thousand."), LONG)
    async for delta in stream:
        assert delta.finish_reason is None
        assert engine.stats().kv_blocks_used > 0
        break
    await stream.aclose()
    await wait_until_idle(engine)


async def test_cancelled_task_aborts_and_frees_blocks(engine: AsyncEngine) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.generate(prompt(engine, "Tell a long story."), LONG):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until_idle(engine)


async def test_invalid_requests_fail_before_queueing(engine: AsyncEngine) -> None:
    with pytest.raises(InvalidRequest) as too_long:
        await collect(engine, [1] * engine.max_model_len)
    assert too_long.value.param == "prompt"
    with pytest.raises(InvalidRequest) as bad:
        await collect(engine, "hi", SamplingParams(top_p=0))
    assert bad.value.param == "top_p"
    assert engine.stats().num_waiting == 0 and engine.stats().num_running == 0


async def test_a_failing_step_fails_its_requests_and_keeps_serving(engine, monkeypatch) -> None:
    runner = engine.engine.runner
    real_run = runner.run
    calls = {"n": 0}

    def fail_once(scheduled, cut=None):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected device failure")
        return real_run(scheduled, cut)

    monkeypatch.setattr(runner, "run", fail_once)
    failed = await collect(engine, prompt(engine, "Hello?"))
    assert failed[-1].finish_reason == "abort"
    assert "injected device failure" in (failed[-1].error or "")
    await wait_until_idle(engine)
    ok = await collect(engine, prompt(engine, "Hello?"))
    assert ok[-1].finish_reason == "length" and ok[-1].error is None


async def test_session_and_stats(engine: AsyncEngine) -> None:
    before = engine.stats()
    text = prompt(engine, "Remember the number 42.")
    await collect(engine, text, session_id="s-1")
    again = await collect(engine, text, session_id="s-1")
    assert again[0].cached_tokens >= 16
    after = engine.stats()
    assert after.prompt_tokens_total > before.prompt_tokens_total
    assert after.cached_tokens_total - before.cached_tokens_total >= again[0].cached_tokens
    assert after.kv_blocks_cached > 0 and after.kv_blocks_total == 64


def test_the_engine_is_made_on_its_step_thread(smollm_fp32, monkeypatch) -> None:
    """The model's load and every step on one thread: a second thread's OpenMP team makes
    libgomp stop spinning between parallel regions (engine/async_engine.py)."""
    import threading

    from engine import async_engine

    made_on = []

    class Recording(async_engine.LLMEngine):
        def __init__(self, *args, **kwargs) -> None:
            made_on.append(threading.get_ident())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(async_engine, "LLMEngine", Recording)
    eng = AsyncEngine(EngineConfig(dtype="float32", num_kv_blocks=16), loaded=tuple(smollm_fp32))
    try:
        step_thread = eng.executor.submit(threading.get_ident).result()
        assert made_on == [step_thread] and step_thread != threading.get_ident()
    finally:
        asyncio.run(eng.shutdown())


def test_an_engine_that_cannot_be_made_raises_and_leaves_no_loop(tmp_path) -> None:
    import threading
    import time

    def loops() -> int:
        return sum(t.name == "engine-step-loop" for t in threading.enumerate())

    before = loops()
    with pytest.raises(Exception, match="missing.gguf"):
        AsyncEngine(EngineConfig(model=str(tmp_path / "missing.gguf")))
    for _ in range(100):
        if loops() == before:
            break
        time.sleep(0.01)
    assert loops() == before
