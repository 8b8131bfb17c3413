"""The pipeline's fallback and timeout rules, on a virtual clock with scripted upstreams.

Each upstream plays a script per request (wait so many seconds, send a chunk, fail), and the
event loop's clock jumps from timer to timer (`virtual_clock.py`), so every test asserts
exact times and metrics ("the fallback was asked at t=5.0") and takes microseconds. The
same rules against live servers and real clocks: `test_pipeline.py`.

Every route here: upstream `first`, fallback `second`, `timeout_s` 5 (the longest silence).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from gateway.cache_stage import CacheStage
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.context import RequestContext
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.transform_stage import TransformStage
from gateway.upstream_call import UpstreamCaller
from gateway.upstreams import Upstream, UpstreamCall
from openai_api import (
    APIError,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    DeltaMessage,
    Usage,
)
from tests.gateway.virtual_clock import run_on_virtual_clock

Step = float | str | APIError  # wait that many seconds | send a chunk with this text | fail


class ClockedUpstream(Upstream):
    """Plays one script per request, in order, on the loop's clock; a script that ends
    without failing finishes the answer (`stop`, then usage). Records when each request
    came (`asked`) and when its stream ended or was closed (`closed`)."""

    def __init__(self, config: UpstreamConfig, *scripts: list[Step], whole: bool = False):
        super().__init__(config)
        self.scripts = list(scripts)
        self.whole = whole  # answers unstreamed requests in one piece (`answer`)
        self.asked: list[float] = []
        self.closed: list[float] = []

    async def _play(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        self.asked.append(loop.time())
        try:
            for step in self.scripts.pop(0):
                if isinstance(step, APIError):
                    raise step
                if isinstance(step, str):
                    yield step
                else:
                    await asyncio.sleep(step)
        finally:
            self.closed.append(loop.time())

    async def stream_chat(self, request: ChatCompletionRequest,
                          call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        def chunk(delta: DeltaMessage | None, finish: Any = None,
                  usage: Usage | None = None) -> ChatCompletionChunk:
            choices = [] if delta is None else [ChunkChoice(delta=delta, finish_reason=finish)]
            return ChatCompletionChunk(id=self.name, model="up", choices=choices, usage=usage)

        count = 0
        async with aclosing(self._play()) as texts:
            async for text in texts:
                count += 1
                yield chunk(DeltaMessage(content=text))
        yield chunk(DeltaMessage(), "stop")
        yield chunk(None, usage=Usage.of(3, count))

    def stream_completion(self, request: Any, call: UpstreamCall) -> Any:
        raise NotImplementedError("chat only")

    def answers_whole(self, request: Any) -> bool:
        return self.whole

    async def answer(self, request: Any, call: UpstreamCall) -> ChatCompletion:
        async with aclosing(self._play()) as texts:
            parts = [text async for text in texts]
        return ChatCompletion(model="up", usage=Usage.of(3, len(parts)), choices=[ChatChoice(
            message=AssistantMessage(content="".join(parts)), finish_reason="stop")])


def failure(status: int) -> APIError:
    return APIError(status, f"upstream 'scripted': failed with {status}")


class Setup:
    """A pipeline over two scripted upstreams, measured on the loop's clock."""

    def __init__(self, first: list[list[Step]], second: list[list[Step]], *,
                 whole: bool = False, **route: Any) -> None:
        self.config = GatewayConfig.from_dict({
            "upstreams": {name: {"kind": "openai", "base_url": f"http://{name}/v1"}
                          for name in ("first", "second")},
            "routes": [{"name": "r", "models": ["m"], "upstream": "first",
                        "fallback": "second", "timeout_s": 5, **route}],
        })
        self.first = ClockedUpstream(self.config.upstreams["first"], *first, whole=whole)
        self.second = ClockedUpstream(self.config.upstreams["second"], *second, whole=whole)
        self.metrics = GatewayMetrics()
        clock = asyncio.get_running_loop().time
        caller = UpstreamCaller({"first": self.first, "second": self.second}, self.metrics,
                                clock=clock)
        self.pipeline = Pipeline(CacheStage(None, self.config),
                                 TransformStage(self.config, caller), caller, self.metrics,
                                 clock=clock)
        self.ctx = RequestContext(request_id="t", kind="chat", route=self.config.routes[0],
                                  started=0.0, body=ChatCompletionRequest(
                                      model="m", stream=not whole,
                                      messages=[{"role": "user", "content": "hi"}]))

    async def text(self) -> str:
        """The answer's text, read to the end; then the metrics recorded `later`."""
        try:
            chunks = [c async for c in self.pipeline.run(self.ctx)]
        finally:
            await asyncio.sleep(0)
        return "".join(ch.delta.content or "" for c in chunks for ch in c.choices)

    def upstream_seconds(self, name: str, outcome: str) -> tuple[int, float]:
        """(attempts, seconds) recorded for `name` with `outcome`."""
        child = self.metrics.upstream_time.labels("r", name, outcome)
        return sum(child.counts), child.sum

    def counted(self, metric: str, *labels: str) -> float:
        return getattr(self.metrics, metric).labels(*labels).value


def on_virtual_clock(test: Any) -> Any:
    """Run an async test on a fresh virtual clock (t = 0 at its start)."""
    def run() -> None:
        run_on_virtual_clock(test())
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


@on_virtual_clock
async def test_a_5xx_before_the_first_chunk_falls_back() -> None:
    # first fails after 1 s; second answers 0.5 s later: served by second, both timed
    s = Setup(first=[[1.0, failure(503)]], second=[[0.5, "hello ", "world"]])
    assert await s.text() == "hello world"
    assert s.ctx.report.upstream == "second" and s.second.asked == [1.0]
    assert s.upstream_seconds("first", "error") == (1, 1.0)
    assert s.upstream_seconds("second", "ok") == (1, 0.5)
    assert s.ctx.timings.header() == b"upstream;dur=500.00"  # the attempt that answered
    assert s.counted("fallbacks", "r", "second") == 1
    assert s.counted("requests", "r", "ok") == 1


@on_virtual_clock
async def test_a_4xx_is_the_answer_and_no_fallback_is_asked() -> None:
    # the client's own mistake: another upstream would refuse it too
    s = Setup(first=[[failure(400)]], second=[["never"]])
    with pytest.raises(APIError) as info:
        await s.text()
    assert info.value.status == 400 and info.value.message.endswith("failed with 400")
    assert s.second.asked == []
    assert s.counted("requests", "r", "error") == 1


@on_virtual_clock
async def test_silence_past_timeout_s_falls_back_at_exactly_timeout_s() -> None:
    # first says nothing for a minute: cut at t=5, its stream closed then, second asked then
    s = Setup(first=[[60.0, "late"]], second=[["quick"]])
    assert await s.text() == "quick"
    assert s.first.closed == [5.0] and s.second.asked == [5.0]
    assert s.upstream_seconds("first", "error") == (1, 5.0)
    assert s.counted("fallbacks", "r", "second") == 1


@on_virtual_clock
async def test_the_timeout_bounds_each_silence_not_the_whole_answer() -> None:
    # chunks 4 s apart (each inside 5 s) for 12 s in all: never cut
    s = Setup(first=[[4.0, "a", 4.0, "b", 4.0, "c"]], second=[])
    assert await s.text() == "abc"
    assert s.first.closed == [12.0]
    assert s.upstream_seconds("first", "ok") == (1, 12.0)


@on_virtual_clock
async def test_silence_after_the_first_chunk_is_a_504_without_fallback() -> None:
    # a chunk went to the client already: the answer cannot start over elsewhere
    s = Setup(first=[["a", 6.0, "b"]], second=[["never"]])
    chunks = []
    with pytest.raises(APIError) as info:
        async for chunk in s.pipeline.run(s.ctx):
            chunks.append(chunk)
    await asyncio.sleep(0)
    assert [c.choices[0].delta.content for c in chunks] == ["a"]
    assert (info.value.status, info.value.code) == (504, "upstream_timeout")
    assert info.value.message.startswith("upstream 'first': no response within")
    assert s.first.closed == [5.0] and s.second.asked == []
    assert s.upstream_seconds("first", "error") == (1, 5.0)


@on_virtual_clock
async def test_the_total_deadline_spans_the_fallback() -> None:
    # total_timeout_s 7: first is cut at t=5; second would answer at t=8, so it is cut at t=7
    s = Setup(first=[[60.0]], second=[[3.0, "late"]], total_timeout_s=7)
    with pytest.raises(APIError) as info:
        await s.text()
    assert (info.value.status, info.value.code) == (504, "upstream_timeout")
    assert "upstream 'second'" in info.value.message
    assert s.first.closed == [5.0] and s.second.asked == [5.0] and s.second.closed == [7.0]
    assert s.upstream_seconds("second", "error") == (1, 2.0)


@on_virtual_clock
async def test_a_client_leaving_closes_the_upstream_stream() -> None:
    # the consumer stops after the first chunk, at t=1: the upstream's stream closes then
    s = Setup(first=[["a", 30.0, "b"]], second=[])
    stream = s.pipeline.run(s.ctx)
    assert (await anext(stream)).choices[0].delta.content == "a"
    await asyncio.sleep(1.0)
    await stream.aclose()
    await asyncio.sleep(0)
    assert s.first.closed == [1.0]
    assert s.upstream_seconds("first", "aborted") == (1, 1.0)
    assert s.counted("requests", "r", "aborted") == 1


@on_virtual_clock
async def test_a_whole_answer_falls_back_on_silence_too() -> None:
    # unstreamed on both sides (`answer_whole`): the same cut at t=5 and the same fallback
    s = Setup(first=[[60.0, "late"]], second=[[1.0, "whole"]], whole=True)
    assert s.pipeline.answers_whole(s.ctx)
    answer = await s.pipeline.answer_whole(s.ctx)
    await asyncio.sleep(0)
    assert answer.choices[0].message.content == "whole" and answer.model == "m"
    assert s.first.closed == [5.0] and s.second.asked == [5.0] and s.second.closed == [6.0]
    assert s.upstream_seconds("first", "error") == (1, 5.0)
    assert s.upstream_seconds("second", "ok") == (1, 1.0)
    assert s.counted("fallbacks", "r", "second") == 1
