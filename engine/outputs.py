"""What the engine hands back: per-request deltas and engine-wide statistics."""

from __future__ import annotations

from dataclasses import dataclass

from engine.kv_tier import TierStats


@dataclass
class TokenLogprobs:
    """A sampled token's log-probability under the model, with the likeliest tokens at its
    step (best first), each as (text, bytes, logprob): a token may hold part of a character."""

    token: str
    token_bytes: bytes
    logprob: float
    top: list[tuple[str, bytes, float]]


@dataclass
class GenerationDelta:
    """New output of one request since its previous delta (one per step that produced a token)."""

    request_id: str
    text: str  # new text since the previous delta; never broken UTF-8
    token_ids: list[int]  # new token ids
    finish_reason: str | None  # None | "stop" | "length" | "abort"
    prompt_tokens: int
    cached_tokens: int  # prompt tokens reused from the prefix cache
    completion_tokens: int  # so far
    queue_time_s: float | None = None  # set on the first delta
    ttft_s: float | None = None  # set on the first delta
    error: str | None = None  # set with finish_reason "abort" when the engine failed the request
    logprobs: list[TokenLogprobs] | None = None  # one per token id, when the request asked

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class EngineStats:
    """A snapshot of the engine's load and cache use (for /metrics and the dashboard)."""

    num_running: int
    num_waiting: int
    kv_blocks_total: int
    kv_blocks_used: int  # referenced by a live request
    kv_blocks_cached: int  # unreferenced but holding reusable prefix content
    prompt_tokens_total: int
    cached_tokens_total: int  # prompt tokens served from the prefix cache
    num_preemptions: int = 0
    num_priority_preemptions: int = 0  # of them, a better class taking a slot or blocks
    num_interrupted_steps: int = 0  # steps stopped between layers for a better class
    num_steps: int = 0
    tier: TierStats | None = None  # the second KV tier (`kv_offload_mb`), if any

    @property
    def kv_blocks_free(self) -> int:
        return self.kv_blocks_total - self.kv_blocks_used - self.kv_blocks_cached

    @property
    def prefix_hit_rate(self) -> float:
        if not self.prompt_tokens_total:
            return 0.0
        return self.cached_tokens_total / self.prompt_tokens_total


@dataclass
class RequestOutput:
    """A whole finished request, for the synchronous `LLMEngine.generate` (tests, scripts)."""

    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
