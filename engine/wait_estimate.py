"""How long a request arriving now would wait before the engine starts reading its prompt.

Admission control (the gateway's `limits.max_queue_s`) asks this before queueing a request.
The answer replays the scheduler's policy in closed form over a snapshot of its queues:
`max_num_seqs` slots; a queued request takes the first slot that frees and then reads its
prompt, prompts being read one after another (they share each step's token budget); a
running request frees its slot after its remaining answer. The wait ends when the new
request's own prompt would start: its own prompt is service, not queueing, so an idle
engine never refuses a request however long it is. Costs come from the engine's own steps,
measured as they run (`StepMeter`): seconds per decode step and per prompt token read.
Before the first measurements, priors from this model on a 2-core CPU stand in.

              now                                 starts reading this prompt
    slots:    |--running answers--|--next in line--|
    prompts:  |--running prefills--|--waiting prompts--|
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from engine.sequence import Sequence, SequenceStatus

EWMA_WEIGHT = 0.2  # weight of each new measurement
MIN_PREFILL_TOKENS = 32  # steps reading fewer prompt tokens say little about prefill speed


@dataclass
class StepCosts:
    """Measured costs of the engine's steps (exponentially weighted)."""

    decode_step_s: float = 0.025  # a step of decodes only
    prefill_token_s: float = 0.0004  # each prompt token read, beyond a decode step's cost
    answer_tokens: float = 128.0  # tokens a finished answer had
    prefix_hit_ratio: float = 0.0  # share of prompt tokens found in the prefix cache


def _ewma(old: float, new: float) -> float:
    return old + EWMA_WEIGHT * (new - old)


class StepMeter:
    """Measures steps on the step thread: `before()` snapshots the queues (microseconds),
    `after(seconds)` attributes the step's time to the tokens it computed."""

    def __init__(self) -> None:
        self.costs = StepCosts()
        self._before: list[tuple[Sequence, bool, int, int]] = []

    def before(self, seqs: Iterable[Sequence]) -> None:
        self._before = [(s, s.status is SequenceStatus.WAITING, s.num_computed_tokens,
                         s.num_tokens) for s in seqs]

    def after(self, seconds: float) -> None:
        prefill = decodes = 0
        for seq, was_waiting, computed, tokens in self._before:
            if seq.status is not SequenceStatus.FINISHED:
                done = max(0, seq.num_computed_tokens - computed)
            elif seq.finish_reason in ("stop", "length"):
                done = tokens - computed  # its last step computed every token it had
                self._finished(seq)
            else:
                done = 0  # aborted
            if was_waiting:  # blocks adopted from the prefix cache were not computed
                done = max(0, done - seq.num_cached_tokens)
            if done == 1 and tokens - computed == 1:
                decodes += 1
            else:
                prefill += done
        self._before = []
        costs = self.costs
        if prefill == 0 and decodes:
            costs.decode_step_s = _ewma(costs.decode_step_s, seconds)
        elif prefill >= MIN_PREFILL_TOKENS:
            per_token = max(0.0, seconds - (costs.decode_step_s if decodes else 0.0)) / prefill
            costs.prefill_token_s = _ewma(costs.prefill_token_s, per_token)

    def _finished(self, seq: Sequence) -> None:
        costs = self.costs
        costs.answer_tokens = _ewma(costs.answer_tokens, seq.num_output_tokens)
        if seq.num_prompt_tokens:
            costs.prefix_hit_ratio = _ewma(costs.prefix_hit_ratio,
                                           seq.num_cached_tokens / seq.num_prompt_tokens)


def _answer_left(seq: Sequence, answer_tokens: float) -> float:
    """Tokens `seq` is still expected to generate: the usual answer length, within its
    `max_tokens`, at least one."""
    expected = min(seq.params.max_tokens, max(answer_tokens, seq.num_output_tokens + 1))
    return max(1.0, expected - seq.num_output_tokens)


def expected_wait_s(running: list[Sequence], waiting: list[Sequence], max_num_seqs: int,
                    costs: StepCosts) -> float:
    """Seconds until a new request, queued behind `waiting`, starts being read."""
    uncached = 1.0 - costs.prefix_hit_ratio
    slots: list[float] = [0.0] * max(0, max_num_seqs - len(running))
    prompts_read = 0.0  # when the prompts ahead have all been read
    for seq in running:
        prefill = max(0, seq.num_prompt_tokens - seq.num_computed_tokens) * costs.prefill_token_s
        prompts_read += prefill
        slots.append(prefill + _answer_left(seq, costs.answer_tokens) * costs.decode_step_s)
    heapq.heapify(slots)
    for seq in waiting:
        tokens = max(1.0, (seq.num_tokens - seq.num_computed_tokens) * uncached)
        start = max(prompts_read, heapq.heappop(slots) if slots else 0.0)
        prompts_read = start + tokens * costs.prefill_token_s
        answer = min(float(seq.params.max_tokens), costs.answer_tokens)
        heapq.heappush(slots, prompts_read + (answer + 1) * costs.decode_step_s)
    return max(prompts_read, slots[0] if slots else 0.0)
