"""TransformStage's plans carried out by the pipeline: windowing, compression, decomposition
and map-reduce.

`Scripted` is the route's upstream (it streams real `ChatCompletionChunk`s with small delays
and records what it was sent), reached through the real upstream caller; the token counting
uses the engine's real tokenizer.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from engine import load_tokenizer
from gateway.cache_stage import CacheStage
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.context import RequestContext
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.transform_stage import TransformStage
from gateway.upstream_call import UpstreamCaller
from gateway.upstreams import Upstream as UpstreamAdapter
from gateway.upstreams import UpstreamCall
from openai_api import (
    APIError,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    DeltaMessage,
    Usage,
)
from prompts.quality import make_cases
from prompts.summary_cache import SUMMARY_INSTRUCTION


@pytest.fixture(scope="module")
def engine_like():
    """What the stage reads from the engine: its tokenizer and context length."""
    return SimpleNamespace(tokenizer=load_tokenizer(), max_model_len=8192)


def make_stage(engine_like, **policy) -> tuple[TransformStage, GatewayConfig]:
    config = GatewayConfig.from_dict({
        "upstreams": {"local": {"kind": "engine", "model": "smol"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "local", **policy}]})
    caller = UpstreamCaller({}, GatewayMetrics())  # its upstream: `run`'s
    return TransformStage(config, caller, engine_like), config


def make_ctx(config: GatewayConfig, messages: list[dict], **fields) -> RequestContext:
    body = ChatCompletionRequest(model="smol", messages=messages, **fields)
    return RequestContext(request_id="req-1", kind="chat", body=body, route=config.routes[0])


class Upstream(UpstreamAdapter):
    """Streams `answer to: <last user text>` in pieces; records requests and timing."""

    def __init__(self, delays: dict[str, float] | None = None, fail_on: str | None = None):
        super().__init__(UpstreamConfig(name="local", kind="engine"))
        self.requests: list[ChatCompletionRequest] = []
        self.spans: list[tuple[str, float, float]] = []
        self.delays = delays or {}
        self.fail_on = fail_on

    def stream_completion(self, request, call):
        raise NotImplementedError

    async def stream_chat(self, request: ChatCompletionRequest, call: UpstreamCall):
        self.requests.append(request)
        last = request.messages[-1].text()
        t0 = time.perf_counter()
        delay = next((d for key, d in self.delays.items() if key in last), 0.01)
        if last.startswith(SUMMARY_INSTRUCTION):
            reply = "They talked about topics."
        elif last.startswith("Below is part"):
            reply = "NOT FOUND" if "MARKER" not in last else "The marker is 42."
        else:
            reply = f"answer to: {last.splitlines()[-1][:40]}"
        cid = f"c{len(self.requests)}"

        def chunk(delta, finish=None, usage=None, choices=True):
            return ChatCompletionChunk(
                id=cid, model="smol", usage=usage,
                choices=[ChunkChoice(delta=delta, finish_reason=finish)] if choices else [])

        yield chunk(DeltaMessage(role="assistant", content=""))
        if self.fail_on and self.fail_on in last:
            raise APIError(502, "upstream 'local': boom")
        for word in reply.split(" "):
            await asyncio.sleep(delay / 4)
            yield chunk(DeltaMessage(content=word + " "))
        self.spans.append((last, t0, time.perf_counter()))
        yield chunk(DeltaMessage(), "stop")
        yield chunk(None, usage=Usage.of(len(last) // 4, 5), choices=False)


async def run(stage, ctx, upstream) -> tuple[str, list]:
    stage.caller.upstreams["local"] = upstream
    pipeline = Pipeline(CacheStage(None, stage.config), stage, stage.caller, GatewayMetrics())
    chunks = [c async for c in pipeline.run(ctx)]
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    return text, chunks


def long_chat(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "Be brief."}]
    for t in range(turns):
        msgs += [{"role": "user", "content": f"Turn {t} " + "talk " * 60},
                 {"role": "assistant", "content": f"Reply {t} " + "sure " * 60}]
    return msgs + [{"role": "user", "content": "What now?"}]


async def test_no_policy_is_a_pass_through(engine_like):
    stage, config = make_stage(engine_like)
    ctx, upstream = make_ctx(config, long_chat(2)), Upstream()
    await run(stage, ctx, upstream)
    assert upstream.requests == [ctx.body] and upstream.requests[0] is ctx.body
    assert ctx.report.transforms == []


async def test_window_drops_old_turns_but_not_ctx_body(engine_like):
    stage, config = make_stage(engine_like, window={"max_input_tokens": 600})
    ctx, upstream = make_ctx(config, long_chat(10)), Upstream()
    before = ctx.body.model_dump()
    await run(stage, ctx, upstream)
    sent = [m.model_dump(exclude_none=True) for m in upstream.requests[0].messages]
    assert stage.counter(config.routes[0]).count_messages(sent) <= 600
    assert sent[0]["content"] == "Be brief." and sent[-1]["content"] == "What now?"
    assert ctx.report.transforms[0].startswith("window:dropped=")
    assert ctx.body.model_dump() == before


async def test_window_summary_is_computed_once_per_prefix(engine_like):
    stage, config = make_stage(engine_like, window={"max_input_tokens": 2000,
                                                    "dropped": "summarize"})
    upstream = Upstream()
    for turns in range(16, 22):
        ctx = make_ctx(config, long_chat(turns))
        await run(stage, ctx, upstream)
        assert "window:summary" in ctx.report.transforms
    summaries = [r for r in upstream.requests
                 if r.messages[-1].text().startswith(SUMMARY_INSTRUCTION)]
    answers = [r for r in upstream.requests if r not in summaries]
    assert len(answers) == 6 and len(summaries) <= 2  # the cut moved at most twice in 6 turns
    assert answers[0].messages[1].text().startswith("Summary of the earlier conversation")
    same = [a for a, b in zip(answers, answers[1:], strict=False)
            if a.messages[:-1] == b.messages[:len(a.messages) - 1]]
    assert len(same) >= 3  # later turns extend the earlier prompt byte for byte


async def test_failed_summary_degrades_to_dropping(engine_like):
    stage, config = make_stage(engine_like, window={"max_input_tokens": 900,
                                                    "dropped": "summarize"})
    ctx = make_ctx(config, long_chat(12))
    upstream = Upstream(fail_on=SUMMARY_INSTRUCTION[:20])
    text, _ = await run(stage, ctx, upstream)
    assert "window:summary-failed" in ctx.report.transforms and text.startswith("answer to")
    assert not upstream.requests[-1].messages[1].text().startswith("Summary")


async def test_window_overflow_is_413_with_the_excess(engine_like):
    stage, config = make_stage(engine_like, window={"max_input_tokens": 100})
    ctx = make_ctx(config, [{"role": "user", "content": "word " * 300}])
    with pytest.raises(APIError) as info:
        await run(stage, ctx, Upstream())
    assert info.value.status == 413 and "more than this route's input budget" in info.value.message


async def test_compression_shrinks_long_context(engine_like):
    stage, config = make_stage(engine_like, compress={
        "enabled": True, "min_tokens": 500, "target_ratio": 0.3, "embeddings": False,
        "prefill_tokens_per_s": 200})
    case = make_cases(1, paragraphs=40)[0]
    ctx = make_ctx(config, [{"role": "user", "content": case.prompt}])
    upstream = Upstream()
    await run(stage, ctx, upstream)
    sent = upstream.requests[0].messages[0].text()
    assert len(sent) < 0.5 * len(case.context) and case.answer in sent
    assert ctx.report.transforms[0].startswith("compress:0.")


async def test_a_new_compressed_document_is_read_verbatim_once_in_the_background(engine_like):
    """First ask: compressed (fast), plus one background one-token read of the verbatim text.
    Second ask about it: verbatim (SeenTexts), now in the prefix cache; no second read."""
    stage, config = make_stage(engine_like, compress={
        "enabled": True, "min_tokens": 500, "target_ratio": 0.3, "embeddings": False,
        "prefill_tokens_per_s": 200})
    case = make_cases(1, paragraphs=40)[0]
    upstream = Upstream()
    first = make_ctx(config, [{"role": "user", "content": case.prompt}], stream=True)
    await run(stage, first, upstream)
    assert "compress:prewarm" in first.report.transforms
    for _ in range(100):  # the read runs beside the answer
        if len(upstream.requests) == 2:
            break
        await asyncio.sleep(0.01)
    answer, warm = upstream.requests
    assert len(answer.messages[0].text()) < 0.5 * len(case.prompt)
    assert warm.messages[0].text() == case.prompt and warm.max_tokens == 1
    assert not warm.stream
    again = make_ctx(config, [{"role": "user", "content": case.context + "\n\nAnd the date?"}])
    await run(stage, again, upstream)
    assert len(upstream.requests) == 3 and not again.report.transforms  # verbatim, no prewarm
    assert upstream.requests[2].messages[0].text().startswith(case.context)


QUIZ = "Quick quiz:\n1. Name a prime number.\n2. Name a primary colour.\n3. Who wrote Hamlet?"


async def test_decomposition_runs_concurrently_and_merges_in_order(engine_like):
    stage, config = make_stage(engine_like, decompose={"enabled": True})
    ctx = make_ctx(config, [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": QUIZ}], stream=True)
    upstream = Upstream(delays={"prime": 0.3, "colour": 0.05, "Hamlet": 0.1})
    text, chunks = await run(stage, ctx, upstream)
    assert ctx.report.transforms == ["decompose:3"]
    assert text.index("1. answer to: Name a prime") < text.index("2. answer to: Name a primary")
    assert text.index("2. answer") < text.index("3. answer to: Who wrote Hamlet?")
    spans = sorted(upstream.spans, key=lambda s: s[1])
    assert max(s[1] for s in spans) < min(s[2] for s in spans)  # all started before any ended
    assert all(r.messages[0].text() == "Be brief." for r in upstream.requests)
    assert chunks[-1].usage.completion_tokens == 15  # every sub-call counted
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1


async def test_a_failed_part_is_reported_and_not_cached(engine_like):
    stage, config = make_stage(engine_like, decompose={"enabled": True})
    ctx = make_ctx(config, [{"role": "user", "content": QUIZ}])
    text, _ = await run(stage, ctx, Upstream(fail_on="colour"))
    assert "[part 2 failed: upstream 'local': boom]" in text
    assert "1. answer to" in text and "3. answer to" in text
    assert "decompose:failed=1" in ctx.report.transforms and ctx.report.parts_failed == 1


async def test_every_part_failing_fails_the_request(engine_like):
    stage, config = make_stage(engine_like, decompose={"enabled": True})
    ctx = make_ctx(config, [{"role": "user", "content": QUIZ}])
    with pytest.raises(APIError) as info:
        await run(stage, ctx, Upstream(fail_on="Quick quiz"))  # in every part's text
    assert info.value.status == 502 and "boom" in info.value.message
    text, _ = await run(stage, make_ctx(config, [{"role": "user", "content": QUIZ}]),
                        Upstream(fail_on="Name a"))  # parts 1 and 2 fail, part 3 answers
    assert text.startswith("1. [part 1 failed") and "2. [part 2 failed" in text
    assert "3. answer to: Who wrote Hamlet?" in text


async def test_non_decomposable_passes_through_untouched(engine_like):
    stage, config = make_stage(engine_like, decompose={"enabled": True})
    ctx = make_ctx(config, [{"role": "user", "content": "Tell me about Rome."}])
    upstream = Upstream()
    await run(stage, ctx, upstream)
    assert upstream.requests == [ctx.body] and ctx.report.transforms == []


async def test_map_reduce_for_a_document_over_the_context(engine_like):
    stage, config = make_stage(engine_like, decompose={"enabled": True, "map_reduce": True,
                                                       "context_tokens": 700})
    paras = [f"Paragraph {i}: " + "filler text here " * 20 for i in range(20)]
    paras[13] += " MARKER is forty-two."
    doc = "\n\n".join(paras) + "\n\nWhat is the marker?"
    ctx = make_ctx(config, [{"role": "user", "content": doc}])
    upstream = Upstream()
    text, chunks = await run(stage, ctx, upstream)
    maps = [r for r in upstream.requests if r.messages[-1].text().startswith("Below is part")]
    assert len(maps) >= 3 and ctx.report.transforms == [f"map_reduce:{len(maps)}"]
    reduce = upstream.requests[-1].messages[-1].text()
    assert "The marker is 42." in reduce and "NOT FOUND" not in reduce.split("Question:")[0][200:]
    assert chunks[-1].usage.completion_tokens == 5 * (len(maps) + 1)


@pytest.mark.slow
async def test_engine_model_scorer_scores_and_prunes():
    """The bundled model as the pruning scorer (loads its own copy: slow)."""
    from engine import EngineModelScorer
    from prompts.prune import prune_text

    scorer = EngineModelScorer()
    ids = scorer.encode("The capital of France is Paris. The capital of France is Paris.")
    logprobs = await scorer.token_logprobs(ids)
    assert len(logprobs) == len(ids) and logprobs[0] == 0.0 and all(lp <= 0 for lp in logprobs)
    half = len(ids) // 2
    assert sum(logprobs[half + 1:]) > sum(logprobs[1:half])  # the repeat is predictable
    case = make_cases(1, paragraphs=6)[0]
    result = await prune_text(case.context, scorer, target_ratio=0.5)
    assert result.tokens_out <= 0.55 * result.tokens_in and case.answer in result.text
