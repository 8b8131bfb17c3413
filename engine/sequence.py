"""One request's state inside the engine: its tokens, KV blocks and progress."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from engine.sampling_params import SamplingParams


@dataclass
class HandedPrompt:
    """A prompt another engine read for this one (a prefill/decode handover,
    engine/serving/kv_transfer.py): the token it sampled first, and the K/V of the prompt's
    last partial block (None when the prompt ends on a block boundary, or it did not come).
    With both and the full blocks in the pool this engine computes none of the prompt, and
    the answer goes on exactly as the other engine's would have."""

    first_token: int
    tail: Any = None  # Tensor [1, layers, 2, block_size, kv_heads, head_dim]


class SequenceStatus(Enum):
    WAITING = auto()  # queued, or preempted and waiting to be recomputed
    RUNNING = auto()  # holds KV blocks; prefilling in chunks or decoding
    FINISHED = auto()


class Sequence:
    """Prompt + output token ids and how many of them already have K/V in the cache.

    A step computes `num_tokens - num_computed_tokens` tokens (or a chunk of them); when
    that reaches every token the step also samples the next one. Prefill, chunked
    prefill, decode and recompute after preemption are the same rule.
    """

    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 session_id: str | None = None, arrival_time: float | None = None) -> None:
        self.request_id = request_id
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.session_id = session_id
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # chained hashes of this sequence's full blocks
        self.cache_salt: str | None = None  # partitions the prefix cache (block_manager.salt_root)
        self.priority = 0  # lower runs first under the priority policy (engine/priority.py)
        self.num_committed_blocks = 0  # leading blocks already offered to the prefix cache
        self.num_computed_tokens = 0  # tokens whose K/V sit in the cache
        self.num_cached_tokens = 0  # prompt tokens reused from the prefix cache at admission
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.generator: Any = None  # torch.Generator for seeded sampling (set by the runner)
        # with `params.logprobs`: (logprob, [(token id, logprob), ...]) of the last sampled token
        self.sampled_logprobs: tuple[float, list[tuple[int, float]]] | None = None
        self.detokenizer: Any = None  # IncrementalDetokenizer (set by the engine)
        self.stop_checker: Any = None  # StopChecker (set by the engine)
        self.grammar: Any = None  # GrammarMatcher when params.grammar is set (by the engine)
        self.handed: HandedPrompt | None = None  # read by another engine (decode role)
        self.keeps_tail = False  # prefill role: its last partial block is kept when it ends

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, status={self.status.name})")

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        if self.first_token_time is None:
            self.first_token_time = time.monotonic()

    def queue_time_s(self) -> float | None:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time

    def ttft_s(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time


@dataclass
class ScheduledSequence:
    """One sequence's part of a step: what the scheduler plans and the runner computes."""

    seq: Sequence
    num_new_tokens: int  # tokens to compute this step, starting at seq.num_computed_tokens
    samples: bool  # this step computes the sequence's last token, so it samples the next
