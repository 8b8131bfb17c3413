"""The routes' judges, made from the config: `agreement` (cache/agreement.py) or an upstream
the operator trusts, asked through the gateway's one upstream caller.

`UpstreamJudge` sends the judge prompt (cache/judge_prompt.py) to the named upstream and
reads the one-word reply strictly; it goes through `UpstreamCaller.collect` like a summary
or a map (timeouts, metrics), labelled as the route `<route>.judge` with no fallback, and is
bounded by `judge.timeout_s`. An upstream that fails, times out or refuses gives no verdict
(None): the pair is dropped, and nothing but the promotion count differs from a route whose
judge is up.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from cache import judge_prompt
from cache.agreement import AgreementJudge
from cache.grey import GreyPair
from cache.guard import model_text
from cache.judgement import Judge, Judgement, answer_text
from cache.keys import verify_text
from cache.response_cache import ResponseCache
from cache.stores.base import CacheEntry
from gateway.context import RequestContext
from gateway.judge_queue import RouteQueue
from gateway.upstream_call import UpstreamCaller
from openai_api import APIError, ChatCompletionRequest, ChatMessage

if TYPE_CHECKING:
    from gateway.config import GatewayConfig, RouteConfig

log = logging.getLogger("headstart.gateway")


class UpstreamJudge:
    """Asks `upstream` whether the cached answer fully answers the new question."""

    def __init__(self, caller: UpstreamCaller, route: RouteConfig, upstream: str, model: str,
                 timeout_s: float) -> None:
        self.caller, self.upstream, self.model, self.timeout_s = caller, upstream, model, timeout_s
        self.name = f"upstream:{upstream}"
        self.route = route.model_copy(update={"name": f"{route.name}.judge", "fallback": None,
                                              "total_timeout_s": timeout_s})

    async def __call__(self, pair: GreyPair, entry: CacheEntry) -> Judgement | None:
        new = verify_text(pair.req, pair.settings.context) or ""
        asked = judge_prompt.messages(model_text(new), model_text(pair.candidate.question),
                                      answer_text(entry.answer))
        request = ChatCompletionRequest(
            model=self.model, stream=True, temperature=0.0, max_tokens=judge_prompt.MAX_TOKENS,
            messages=[ChatMessage(role=m["role"], content=m["content"]) for m in asked])
        ctx = RequestContext(request_id=f"judge-{uuid.uuid4().hex[:12]}", kind="chat",
                             body=request, route=self.route)
        try:
            async with asyncio.timeout(self.timeout_s):
                text, finish, _ = await self.caller.collect(ctx, request, upstream=self.upstream)
        except (APIError, TimeoutError, OSError) as e:
            log.info("judge %s: no verdict (%s)", self.name, getattr(e, "message", None) or e)
            return None
        return judge_prompt.read_verdict(text, self.name, finished=finish == "stop")


def route_queues(config: GatewayConfig, cache: ResponseCache,
                 caller: UpstreamCaller) -> dict[str, RouteQueue]:
    """A queue per route whose semantic cache names a judge."""
    queues = {}
    for route in config.routes:
        policy = route.cache.semantic.judge
        if policy is None or not route.cache.semantic.enabled:
            continue
        judge: Judge
        if policy.agreement:
            judge = AgreementJudge(cache.semantic.embedder, policy.similarity)
        else:
            up = config.upstreams[policy.upstream or ""]
            model = up.model or next((m for m in route.models if not any(c in m for c in "*?[")),
                                     route.name)
            judge = UpstreamJudge(caller, route, up.name, model, policy.timeout_s)
        queues[route.name] = RouteQueue(judge, policy.rate_per_s)
    return queues


def busy_check(config: GatewayConfig, caller: UpstreamCaller) -> Callable[[str], bool]:
    """`busy(route)`: whether the upstream a judgement on `route` would load has requests
    waiting (the judge upstream; for `agreement`, the route's own, whose engine the
    embeddings take turns with)."""
    loaded: dict[str, str] = {}
    for route in config.routes:
        policy = route.cache.semantic.judge
        if policy is not None:
            loaded[route.name] = policy.upstream or route.upstream

    def busy(route: str) -> bool:
        admission = caller.admission
        name = loaded.get(route)
        return admission is not None and name is not None and \
            admission.expected_wait_s(name) > 0.0
    return busy
