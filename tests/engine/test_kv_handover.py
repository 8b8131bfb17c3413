"""The KV handover between two engines: the block manager's side with tiny numbers and exact
block ids, the wire over loopback with a scripted pool, and two real engines (one reads the
prompt, the other loads its blocks and decodes) against one engine doing both."""

from __future__ import annotations

import random

import pytest

from engine.block_hash import tail_hash
from engine.block_manager import KVCacheManager
from engine.config import EngineConfig
from engine.kv_handover import (
    BlockLayout,
    HandoverError,
    TailStore,
    export_blocks,
    import_blocks,
    prompt_sequence,
)
from engine.kv_handover_wire import BlockServer, fetch_blocks
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.sequence import HandedPrompt, Sequence
from tests.engine.test_block_manager import admit, make_seq


def test_pool_blocks_are_the_leading_run_the_pool_holds() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = make_seq(list(range(13)))
    admit(kv, a)
    assert kv.pool_blocks(a.block_hashes) == [0, 1, 2]
    assert kv.pool_blocks([a.block_hashes[0], 12345, a.block_hashes[2]]) == [0]


def test_imported_blocks_are_a_prefix_hit_for_the_prompt() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    seq = prompt_sequence(list(range(14)), 4)  # 3 full blocks, 2 tokens past them
    assert kv.import_blocks(seq, 0, 3) == [(0, 0), (1, 1), (2, 2)]
    # cached, unreferenced, tail first in the eviction queue (as `free` leaves them)
    assert list(kv.evictable) == [2, 1, 0]
    request = make_seq(list(range(14)))
    assert admit(kv, request) == [0, 1, 2]
    assert request.block_table == [0, 1, 2, 3]  # only the last partial block is new
    kv.check([request])


def test_import_skips_what_the_pool_holds_and_keeps_it() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(5)), "a")
    admit(kv, a)  # block 0 holds the first 4 tokens, block 1 the fifth
    kv.free(a)
    seq = prompt_sequence(list(range(13)), 4)
    # blocks 1 and 2 of the prompt are new; taking them must not evict block 0 (held)
    assert kv.import_blocks(seq, 0, 3) == [(1, 2), (2, 3)]
    assert kv.pool_blocks(seq.block_hashes) == [0, 2, 3]
    kv.check([])


def test_import_stops_where_the_pool_runs_out() -> None:
    kv = KVCacheManager(num_blocks=3, block_size=4)
    busy = make_seq(list(range(100, 106)), "busy")
    admit(kv, busy)  # holds blocks 0 and 1
    seq = prompt_sequence(list(range(13)), 4)
    assert kv.import_blocks(seq, 0, 3) == [(0, 2)]
    assert kv.pool_blocks(seq.block_hashes) == [2]
    kv.check([busy])


def test_the_wire_carries_the_blocks_the_server_holds() -> None:
    layout = BlockLayout((2, 2, 4, 1, 2), "bfloat16")  # 64 bytes a block
    held = {11: b"a" * 64, 22: b"b" * 64}

    def export(hashes: list[int]) -> tuple[int, bytearray]:
        run = []
        for h in hashes:
            if h not in held:
                break
            run.append(held[h])
        return len(run), bytearray(b"".join(run))

    server = BlockServer("127.0.0.1", 0, layout, export).start()
    try:
        got = fetch_blocks("127.0.0.1", server.port, [11, 22, 33])
        assert got == (layout, 2, bytearray(b"a" * 64 + b"b" * 64))
        assert fetch_blocks("127.0.0.1", server.port, [33])[1:] == (0, bytearray())
    finally:
        server.close()


def test_a_server_that_refuses_is_a_handover_error() -> None:
    def export(hashes: list[int]) -> tuple[int, bytearray]:
        raise RuntimeError("the engine is shutting down")

    server = BlockServer("127.0.0.1", 0, BlockLayout((1, 2, 4, 1, 2), "float32"), export).start()
    try:
        with pytest.raises(HandoverError, match="shutting down"):
            fetch_blocks("127.0.0.1", server.port, [1])
    finally:
        server.close()


@pytest.fixture(scope="module")
def engines(smollm_bf16):
    """Two engines over one loaded model, each with its own pool."""
    def one() -> LLMEngine:
        return LLMEngine(EngineConfig(num_kv_blocks=64, max_num_batched_tokens=512),
                         loaded=tuple(smollm_bf16))
    return one(), one()


def test_a_handed_over_prompt_decodes_as_one_engine_would(engines, smollm_bf16) -> None:
    prefill, decode = engines
    tokenizer = smollm_bf16.tokenizer
    ids = tokenizer.encode("The history of the bicycle began in the early nineteenth century "
                           "with the draisine, a running machine without pedals. " * 8)[:150]
    assert len(ids) == 150
    greedy = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    alone = LLMEngine(EngineConfig(num_kv_blocks=64), loaded=tuple(smollm_bf16))
    expected = alone.generate([ids], greedy)[0]
    first = prefill.generate([ids], SamplingParams(max_tokens=1, temperature=0))[0]
    assert first.token_ids == expected.token_ids[:1]

    seq = prompt_sequence(ids, 16)
    usable = seq.block_hashes[:(len(ids) - 1) // 16]  # 9 blocks: 144 of 150 tokens
    count, buffer = export_blocks(prefill, usable)
    layout = BlockLayout.of(prefill.runner.kv_cache)
    assert count == 9 and len(buffer) == 9 * layout.bytes_per_block == 9 * 368_640
    assert import_blocks(decode, seq, 0, count, layout, buffer) == 9
    got = decode.generate([ids], greedy)[0]
    assert got.token_ids == expected.token_ids
    assert got.cached_tokens == 144  # the decode engine computed only the last 6 tokens
    decode.scheduler.check()


def test_blocks_of_another_layout_are_refused(engines) -> None:
    _, decode = engines
    seq = prompt_sequence(list(range(40)), 16)
    other = BlockLayout((30, 2, 16, 3, 64), "float32")
    with pytest.raises(HandoverError, match="cannot go into a pool"):
        import_blocks(decode, seq, 0, 2, other, bytearray(2 * other.bytes_per_block))
    assert decode.kv.pool_blocks(seq.block_hashes) == []


def test_blocks_load_in_pieces_from_one_buffer(engines, smollm_bf16) -> None:
    prefill, decode = engines
    ids = smollm_bf16.tokenizer.encode("Tides rise and fall twice a day on most coasts. " * 12)
    ids = ids[:100]  # 6 full blocks, 4 tokens past them
    greedy = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    expected = prefill.generate([ids], greedy)[0]
    seq = prompt_sequence(ids, 16)
    count, buffer = export_blocks(prefill, seq.block_hashes)
    layout = BlockLayout.of(prefill.runner.kv_cache)
    size = layout.bytes_per_block
    view = memoryview(buffer)
    assert import_blocks(decode, seq, 0, 4, layout, view[:4 * size]) == 4
    assert import_blocks(decode, seq, 4, 2, layout, view[4 * size:]) == 2
    got = decode.generate([ids], greedy)[0]
    assert (got.token_ids, got.cached_tokens) == (expected.token_ids, 96)
    decode.scheduler.check()


def run(llm: LLMEngine, seq: Sequence) -> list[int]:
    """`seq`'s tokens on `llm`, alone: the handed first token's delta, then each step's."""
    tokens = [t for delta in llm.add_sequence(seq) for t in delta.token_ids]
    while llm.has_unfinished():
        tokens += [t for delta in llm.step() for t in delta.token_ids]
    return tokens


# a last partial block of 9 tokens; none. Seeds where the previous handover (the decode
# engine computing the prompt's last block itself) answered otherwise than a cold engine
@pytest.mark.parametrize("length, seed", [(185, 4185), (160, 7160)])
def test_a_prompt_handed_with_its_tail_answers_as_a_cold_engine(engines, smollm_bf16,
                                                                 length, seed) -> None:
    """Random tokens, where a prompt's last block computed alone (16 tokens) and inside
    the whole prompt round differently in bf16 and greedy answers part: handed its tail
    and first token, the decode engine computes none of the prompt and answers as one
    engine reading it cold."""
    prefill, decode = engines
    tails = TailStore(prefill)
    prefill.keep_tail = tails.keep
    ids = random.Random(seed).sample(range(1000, 40000), length)
    greedy = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    cold = LLMEngine(EngineConfig(num_kv_blocks=64), loaded=tuple(smollm_bf16))
    expected = cold.generate([ids], greedy)[0].token_ids

    read = prefill.make_sequence(ids, SamplingParams(max_tokens=1, temperature=0))
    read.keeps_tail = True
    first = run(prefill, read)
    assert first == expected[:1]
    probe = prompt_sequence([*ids, first[0]], 16)
    full = length // 16
    key = tail_hash(probe.block_hashes, ids, 16, None)
    asked = probe.block_hashes[:full] + ([key] if key is not None else [])
    count, buffer = export_blocks(prefill, asked, tails)
    assert count == len(asked) == -(-length // 16)
    layout, view = BlockLayout.of(prefill.runner.kv_cache), memoryview(buffer)
    assert import_blocks(decode, probe, 0, full, layout,
                         view[:full * layout.bytes_per_block]) == full
    seq = decode.make_sequence(ids, greedy)
    tail = layout.slots(view[full * layout.bytes_per_block:], 1).clone() if key else None
    seq.handed = HandedPrompt(first[0], tail)
    steps = decode.num_steps
    assert run(decode, seq) == expected
    assert seq.num_cached_tokens == length  # none of the prompt computed here
    assert decode.num_steps - steps == 23  # one decode step a token after the handed one
    decode.scheduler.check()
