"""The expected wait for a first token, replayed over the scheduler's queues with fixed step
costs (exact seconds), and the step meter that measures those costs."""

from __future__ import annotations

import pytest

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus
from engine.wait_estimate import StepCosts, StepMeter, expected_wait_s

COSTS = StepCosts(decode_step_s=0.01, prefill_token_s=0.001, answer_tokens=100.0)


def seq(prompt: int, computed: int = 0, output: int = 0, max_tokens: int = 256,
        status: SequenceStatus = SequenceStatus.RUNNING) -> Sequence:
    s = Sequence(f"r{id(object())}", list(range(prompt)), SamplingParams(max_tokens=max_tokens))
    s.token_ids += [7] * output
    s.num_computed_tokens = computed or (prompt + output - 1 if output else 0)
    s.status = status
    return s


def decode(s: Sequence) -> None:
    """What a step does to a decoding sequence: its last token computed, one more sampled."""
    s.num_computed_tokens += 1
    s.token_ids.append(7)


def test_an_idle_engine_makes_no_one_wait_however_long_the_prompt():
    assert expected_wait_s([], [], 4, COSTS) == 0.0


def test_with_free_slots_the_prompts_ahead_are_read_first():
    running = [seq(300, computed=100)]  # 200 tokens of its prompt still to read
    waiting = [seq(50, status=SequenceStatus.WAITING)]
    assert expected_wait_s(running, waiting, 4, COSTS) == pytest.approx(0.2 + 0.05)


def test_with_every_slot_taken_a_request_waits_for_an_answer_to_finish():
    running = [seq(10, output=60), seq(10, output=90)]  # 40 and 10 tokens left of 100
    # the second frees its slot after 10 decode steps
    assert expected_wait_s(running, [], 2, COSTS) == pytest.approx(0.1)
    # one more in line takes that slot first; this one gets the other (40 steps)
    waiting = [seq(100, status=SequenceStatus.WAITING)]
    assert expected_wait_s(running, waiting, 2, COSTS) == pytest.approx(0.4)


def test_a_short_max_tokens_frees_its_slot_sooner_and_the_cache_hit_ratio_discounts():
    running = [seq(10, output=5, max_tokens=10)]  # 5 left, not 95
    assert expected_wait_s(running, [], 1, COSTS) == pytest.approx(0.05)
    cached = StepCosts(0.01, 0.001, 100.0, prefix_hit_ratio=0.75)
    waiting = [seq(400, status=SequenceStatus.WAITING)]  # a quarter of it left to read
    assert expected_wait_s([], waiting, 2, cached) == pytest.approx(0.1)


def test_the_meter_splits_a_step_into_decodes_and_prompt_tokens():
    meter = StepMeter()
    decoding = seq(10, output=3)
    meter.before([decoding])
    decode(decoding)  # a decode-only step of 40 ms
    meter.after(0.040)
    assert meter.costs.decode_step_s == pytest.approx(0.025 + 0.2 * (0.040 - 0.025))
    reading = seq(400, computed=0, status=SequenceStatus.WAITING)
    meter.before([decoding, reading])
    decode(decoding)
    reading.num_computed_tokens = 200
    reading.status = SequenceStatus.RUNNING
    meter.after(0.028 + 0.1)  # the decode step's cost plus 200 prompt tokens
    step = meter.costs.decode_step_s
    assert meter.costs.prefill_token_s == pytest.approx(
        0.0004 + 0.2 * ((0.128 - step) / 200 - 0.0004))


def test_a_finished_answer_updates_the_expected_length_and_hit_ratio():
    meter = StepMeter()
    done = seq(100, output=19)
    done.num_cached_tokens = 50
    meter.before([done])
    done.token_ids.append(1)
    done.status, done.finish_reason = SequenceStatus.FINISHED, "stop"
    meter.after(0.01)
    assert meter.costs.answer_tokens == pytest.approx(128 + 0.2 * (20 - 128))
    assert meter.costs.prefix_hit_ratio == pytest.approx(0.2 * 0.5)
