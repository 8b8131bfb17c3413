"""Other torch work on the engine's step thread: it runs between steps, never against them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams

LONG = SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)


@pytest.fixture
def engine(smollm_fp32):
    eng = AsyncEngine(EngineConfig(dtype="float32", num_kv_blocks=64), loaded=tuple(smollm_fp32))
    yield eng
    asyncio.run(eng.shutdown())


async def test_a_job_on_an_idle_engine_runs_on_the_step_thread(engine: AsyncEngine) -> None:
    loop = asyncio.get_running_loop()
    name = await loop.run_in_executor(engine.executor, lambda: threading.current_thread().name)
    assert name == "engine-step-loop"
    assert engine.on_cpu
    with pytest.raises(ZeroDivisionError):  # the caller gets the job's exception
        await loop.run_in_executor(engine.executor, lambda: 1 / 0)
    # the loop survived the failing job
    assert await loop.run_in_executor(engine.executor, sum, [1, 2, 3]) == 6


async def test_jobs_run_between_the_steps_of_a_running_request(engine: AsyncEngine) -> None:
    loop = asyncio.get_running_loop()
    steps_seen: list[int] = []
    stream = engine.generate("Count slowly from one to a hundred:", LONG)
    tokens = 0
    async for delta in stream:
        tokens += len(delta.token_ids)
        if tokens in (5, 20):  # mid-generation: the job must not wait for the end
            steps_seen.append(await loop.run_in_executor(
                engine.executor, lambda: engine.engine.num_steps))
    assert tokens == 120
    assert len(steps_seen) == 2 and steps_seen[0] < steps_seen[1] < engine.engine.num_steps


async def test_work_after_shutdown_is_refused(engine: AsyncEngine) -> None:
    await engine.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        engine.executor.submit(sum, [1])
