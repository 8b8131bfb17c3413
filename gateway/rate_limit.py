"""Per-key and per-tenant limits: requests and tokens per minute (`rpm`, `tpm`).

Each limit is a GCRA bucket (a token bucket kept as one number, the "theoretical arrival
time"): a key with `rpm: 600` may send 600 requests at once and then one every 100 ms, as
OpenAI's limits replenish continuously. A request checks every bucket that applies (its
key's and its tenant's requests and tokens) and is charged in all of them or in none.
Tokens are charged on arrival as OpenAI estimates them (the prompt's characters / 4, plus
`max_tokens` for each choice when given), then settled against the answer's real usage.

The buckets live in Redis when the gateway has one (`RedisBuckets`: one Lua call per request,
shared by every replica) and in memory otherwise. Answers carry OpenAI's headers
(`x-ratelimit-limit-requests`, `-remaining-requests`, `-reset-requests`, and `-tokens`);
a refused request gets 429 with them and `Retry-After`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.auth import Caller
from gateway.config import GatewayConfig
from gateway.context import RequestContext
from gateway.metrics import GatewayMetrics
from gateway.rate_buckets import PERIOD_S, Bucket, Buckets, Kind, Level, MemoryBuckets, RedisBuckets
from gateway.token_estimate import estimate_prompt_tokens
from openai_api import APIError, ChatCompletionRequest, CompletionRequest

log = logging.getLogger("headstart.gateway")


def estimate_tokens(body: ChatCompletionRequest | CompletionRequest) -> int:
    """Tokens charged on arrival: the prompt's estimate plus `max_tokens` for each choice
    when the request sets it (as OpenAI charges)."""
    most = body.effective_max_tokens()
    return estimate_prompt_tokens(body) + (most or 0) * body.choice_count()


def buckets_for(caller: Caller) -> list[Bucket]:
    """The buckets that apply to `caller`: its key's, then its tenant's."""
    out = []
    for scope, limits in ((f"k:{caller.key_id[:32]}", caller.key_limits),
                          (f"t:{caller.tenant}", caller.tenant_limits)):
        if limits.rpm:
            out.append(Bucket(f"{scope}:rpm", "requests", limits.rpm))
        if limits.tpm:
            out.append(Bucket(f"{scope}:tpm", "tokens", limits.tpm))
    return out


def duration(seconds: float) -> str:
    """OpenAI's reset format: `120ms`, `7s`, `6m0s`."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, secs = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def limit_headers(charges: list[tuple[Bucket, int]], levels: list[Level],
                  ok: bool) -> dict[str, str]:
    """`x-ratelimit-*` for the binding bucket of each kind (the fewest units left)."""
    headers: dict[str, str] = {}
    best: dict[Kind, tuple[int, Bucket, float]] = {}
    for (bucket, _), level in zip(charges, levels, strict=True):
        filled = level.after if ok else level.before
        remaining = max(0, math.floor((PERIOD_S - filled) / bucket.interval_s + 1e-9))
        if bucket.kind not in best or remaining < best[bucket.kind][0]:
            best[bucket.kind] = (remaining, bucket, filled)
    for kind, (remaining, bucket, filled) in best.items():
        headers[f"x-ratelimit-limit-{kind}"] = str(bucket.per_minute)
        headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
        headers[f"x-ratelimit-reset-{kind}"] = duration(filled)
    return headers


def refusal(charges: list[tuple[Bucket, int]], levels: list[Level]) -> tuple[APIError, Bucket]:
    """The 429 for a refused take (which limit, when to retry) and the bucket that refused."""
    over = [(bucket, cost, level) for (bucket, cost), level in zip(charges, levels, strict=True)
            if level.after > PERIOD_S]
    bucket, cost, level = max(over, key=lambda item: item[2].after)
    wait = max(level.after - PERIOD_S for _, _, level in over)
    who = "tenant" if bucket.name.startswith("t:") else "key"
    if cost > bucket.per_minute:
        message = (f"Request too large: it needs about {cost} {bucket.kind} and the {who}'s "
                   f"limit is {bucket.per_minute} {bucket.kind} per minute")
        wait = PERIOD_S
    else:
        message = (f"Rate limit reached for this {who}: {bucket.per_minute} {bucket.kind} per "
                   f"minute. Please try again in {duration(wait)}.")
    headers = limit_headers(charges, levels, ok=False)
    headers["retry-after"] = str(max(1, math.ceil(wait)))
    headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
    return APIError(429, message, code="rate_limit_exceeded", headers=headers), bucket


class RateLimiter:
    """Checks and settles a request's limits; `on_refused(route, kind)` counts refusals."""

    def __init__(self, buckets: Buckets, on_refused: Callable[[str, str], None]) -> None:
        self.buckets = buckets
        self.on_refused = on_refused
        self._settling: set[asyncio.Task[None]] = set()

    @classmethod
    def for_config(cls, config: GatewayConfig, metrics: GatewayMetrics) -> RateLimiter:
        """Buckets in the config's Redis when it has one, else in memory."""
        buckets: Buckets = MemoryBuckets()
        if config.redis and config.redis.startswith("redis://"):
            buckets = RedisBuckets(config.redis, metrics.count_rate_limit_store_error)
        elif config.redis:
            log.warning("rate limits: counted per gateway process (the limiter speaks plain "
                        "redis:// only, not %s)", config.redis.split("://", 1)[0] + "://")
        return cls(buckets, metrics.count_shed)

    def close(self) -> None:
        close = getattr(self.buckets, "close", None)
        if close is not None:
            close()

    async def check(self, ctx: RequestContext, caller: Caller | None) -> Settlement | None:
        """Charge the request; 429 (`APIError`) when a limit is reached. Sets
        `ctx.limit_headers`. None when no limit applies to the caller."""
        buckets = [] if caller is None else buckets_for(caller)
        if not buckets:
            return None
        estimate = estimate_tokens(ctx.body)
        charges = [(b, 1 if b.kind == "requests" else estimate) for b in buckets]
        taken = await self.buckets.take(charges)
        if taken is None:  # the shared store is down: fail open
            return None
        ok, levels = taken
        if not ok:
            refused, bucket = refusal(charges, levels)
            self.on_refused(ctx.route.name, "rpm" if bucket.kind == "requests" else "tpm")
            raise refused
        ctx.limit_headers = [(k.encode(), v.encode())
                             for k, v in limit_headers(charges, levels, ok=True).items()]
        tokens = [b for b in buckets if b.kind == "tokens"]
        return Settlement(self, tokens, estimate) if tokens else None

    def settle_later(self, settlement: Settlement, ctx: RequestContext) -> None:
        """Correct the token buckets once the answer's usage is known (after the pipeline
        recorded it: its bookkeeping runs on the loop's next turn, and so does this)."""
        def start() -> None:
            task = asyncio.ensure_future(settlement.settle(ctx))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
        asyncio.get_running_loop().call_soon(start)


@dataclass
class Settlement:
    """The token charge of one admitted request, corrected by its real usage."""

    limiter: RateLimiter
    buckets: list[Bucket]
    estimate: int

    async def settle(self, ctx: RequestContext) -> None:
        usage = ctx.report.usage
        if usage is None or not usage.total_tokens:
            return  # unknown (an error or an abort): the estimate stands
        delta = usage.total_tokens - self.estimate
        if delta:
            await _quietly(self.limiter.buckets.settle([(b, delta) for b in self.buckets]))


async def _quietly(work: Awaitable[None]) -> None:
    try:
        await work
    except Exception:  # noqa: BLE001 - a settlement lost to a store outage is not an error
        pass
