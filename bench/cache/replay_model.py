"""The bundled model in the replay: the upstream's answers, and the judge upstream.

Both go through the gateway's own parts: an in-process engine upstream (SmolLM2-135M, the
bundled model), the gateway's `UpstreamCaller`, and for the judge `gateway.judges.
UpstreamJudge` with its prompt and strict reading. The answers (temperature 0, at most
`ANSWER_TOKENS` tokens) are what `agreement` compares; they are written to a JSON file once
and read back on later runs, so the arms compare the same answers and a rerun does not
generate them again. A 135M model is a weak judge and an inconsistent answerer: its arms
show the mechanism with a weak model, not what a strong one would do.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine import AsyncEngine, EngineConfig, OpenAIEngine
from gateway.config import DEFAULT_MODEL_NAME, GatewayConfig
from gateway.context import RequestContext
from gateway.judges import UpstreamJudge
from gateway.metrics import GatewayMetrics
from gateway.upstream_call import UpstreamCaller
from gateway.upstreams import build_upstreams
from openai_api import ChatCompletionRequest, ChatMessage

ANSWER_TOKENS = 48
CONCURRENCY = 16
JUDGE_TIMEOUT_S = 60.0  # generous: the replay judges one pair at a time on a busy CPU


class BundledModel:
    """The bundled engine behind an `UpstreamCaller`, opened once for a replay run."""

    def __init__(self) -> None:
        self.config = GatewayConfig.from_dict({
            "upstreams": {"local": {"kind": "engine", "model": DEFAULT_MODEL_NAME}},
            "routes": [{"name": "replay", "models": ["replay"], "upstream": "local",
                        "timeout_s": JUDGE_TIMEOUT_S}]})
        self.engine: AsyncEngine | None = None
        self.caller: UpstreamCaller | None = None

    async def open(self) -> BundledModel:
        self.engine = await asyncio.to_thread(
            AsyncEngine, EngineConfig(model_name=DEFAULT_MODEL_NAME))
        upstreams = build_upstreams(self.config, OpenAIEngine(self.engine))
        for upstream in upstreams.values():
            await upstream.start()
        self.caller = UpstreamCaller(upstreams, GatewayMetrics())
        return self

    def judge(self) -> UpstreamJudge:
        assert self.caller is not None
        return UpstreamJudge(self.caller, self.config.routes[0], "local", DEFAULT_MODEL_NAME,
                             JUDGE_TIMEOUT_S)

    async def answer(self, text: str) -> str:
        assert self.caller is not None
        request = ChatCompletionRequest(model=DEFAULT_MODEL_NAME, stream=True, temperature=0.0,
                                        max_tokens=ANSWER_TOKENS,
                                        messages=[ChatMessage(role="user", content=text)])
        ctx = RequestContext(request_id="replay-answer", kind="chat", body=request,
                             route=self.config.routes[0])
        found, _, _ = await self.caller.collect(ctx, request)
        return found

    async def answers(self, texts: list[str], path: Path) -> dict[str, str]:
        """The model's answer to every text, from `path` where it has them; the rest are
        generated (`CONCURRENCY` at a time) and `path` rewritten."""
        known: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(text: str) -> None:
            async with gate:
                known[text] = await self.answer(text)

        for start in range(0, len(todo), 256):  # written as it goes: a long run can resume
            await asyncio.gather(*(one(t) for t in todo[start:start + 256]))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, ensure_ascii=False))
        return known

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.shutdown()
