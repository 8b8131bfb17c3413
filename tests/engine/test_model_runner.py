"""ModelRunner: the flat batch it builds, KV pool sizing, and chunked vs one-shot compute."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.model_runner import ModelRunner, kv_bytes_per_block
from engine.sampling_params import SamplingParams
from engine.sequence import ScheduledSequence, Sequence

GREEDY = SamplingParams(temperature=0)


def make_seq(tokens: list[int], table: list[int], computed: int) -> Sequence:
    seq = Sequence(f"r{len(tokens)}", tokens, GREEDY)
    seq.block_table, seq.num_computed_tokens = table, computed
    return seq


@pytest.fixture(scope="module")
def runner(smollm_fp32) -> ModelRunner:
    config = EngineConfig(dtype="float32", block_size=4, num_kv_blocks=16)
    return ModelRunner(smollm_fp32.model, smollm_fp32.config, config)


def test_flat_batch_layout(runner: ModelRunner) -> None:
    prefill = make_seq([11, 12, 13, 14, 15, 16], [3, 5], computed=0)
    decode = make_seq(list(range(100, 110)), [1, 2, 7], computed=9)
    chunk = make_seq(list(range(200, 210)), [0, 4, 6], computed=4)
    items = [ScheduledSequence(prefill, 6, True), ScheduledSequence(decode, 1, True),
             ScheduledSequence(chunk, 3, False)]
    input_ids, positions, meta, rows = runner.prepare(items)
    assert input_ids.tolist() == [11, 12, 13, 14, 15, 16, 109, 204, 205, 206]
    assert positions.tolist() == [0, 1, 2, 3, 4, 5, 9, 4, 5, 6]
    assert meta.slot_mapping.tolist() == [12, 13, 14, 15, 20, 21, 29, 16, 17, 18]
    assert meta.query_start_loc == [0, 6, 7, 10]
    assert meta.context_lens == [6, 10, 7]
    assert meta.block_tables.tolist() == [[3, 5, 0], [1, 2, 7], [0, 4, 6]]
    assert rows == [5, 6]  # the chunk that does not finish its prompt samples nothing


def test_pool_sized_from_memory_budget(smollm_fp32) -> None:
    per_block = kv_bytes_per_block(smollm_fp32.config, 16, torch.float32)
    assert per_block == 30 * 2 * 3 * 64 * 4 * 16
    runner = ModelRunner(smollm_fp32.model, smollm_fp32.config,
                         EngineConfig(dtype="float32", kv_cache_memory_mb=8))
    assert runner.num_blocks == 8 * 1024 * 1024 // per_block
    assert tuple(runner.kv_cache.shape) == (30, 2, runner.num_blocks, 16, 3, 64)


def test_chunked_compute_samples_what_one_shot_does(runner: ModelRunner) -> None:
    tokens = [1, 504, 3575, 282, 4649, 314, 2, 4, 17, 900, 1200, 55, 23]
    one_shot = make_seq(list(tokens), [0, 1, 2, 3], computed=0)
    expected = runner.run([ScheduledSequence(one_shot, len(tokens), True)])
    chunked = make_seq(list(tokens), [8, 9, 10, 11], computed=0)
    for size in (5, 5):
        assert runner.run([ScheduledSequence(chunked, size, False)]) == []
        chunked.num_computed_tokens += size
    assert runner.run([ScheduledSequence(chunked, 3, True)]) == expected
    # Two sequences in one batch, one a fresh prompt and one the chunked tail, agree too.
    again = make_seq(list(tokens), [12, 13, 14, 15], computed=0)
    chunked.num_computed_tokens = 10
    both = runner.run([ScheduledSequence(again, len(tokens), True),
                       ScheduledSequence(chunked, 3, True)])
    assert both == expected * 2
