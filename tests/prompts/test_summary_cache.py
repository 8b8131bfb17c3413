"""Summaries are written once per dropped prefix, shared by concurrent requests."""

from __future__ import annotations

import asyncio

import pytest

from prompts.summary_cache import SummaryCache, transcript


class CountingSummarizer:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def summarize(self, text: str) -> str:
        self.calls += 1
        await asyncio.sleep(0.02)
        if self.fail:
            raise RuntimeError("summariser down")
        return f"summary of {text.count(chr(10))} lines"


DROPPED = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hi"}]


async def test_once_per_prefix_and_byte_stable():
    cache, summarizer = SummaryCache(), CountingSummarizer()
    first = await cache.summary(DROPPED, summarizer)
    again = await cache.summary(list(DROPPED), summarizer)
    assert first == again and summarizer.calls == 1 and cache.hits == 1
    await cache.summary(DROPPED + [{"role": "user", "content": "more"}], summarizer)
    assert summarizer.calls == 2


async def test_concurrent_requests_share_one_call():
    cache, summarizer = SummaryCache(), CountingSummarizer()
    texts = await asyncio.gather(*(cache.summary(DROPPED, summarizer) for _ in range(5)))
    assert len(set(texts)) == 1 and summarizer.calls == 1


async def test_failures_are_not_cached():
    cache = SummaryCache()
    with pytest.raises(RuntimeError):
        await cache.summary(DROPPED, CountingSummarizer(fail=True))
    assert len(cache) == 0
    assert await cache.summary(DROPPED, CountingSummarizer()) == "summary of 3 lines"  # instruction + 2 turns


def test_transcript_names_tool_calls():
    msgs = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}]
    assert "lookup" in transcript(msgs)
