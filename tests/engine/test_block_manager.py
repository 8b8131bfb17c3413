"""KVCacheManager on its own with tiny sizes: exact block ids, hash reuse, ref counts, eviction."""

from __future__ import annotations

import pytest

from engine.block_manager import KVCacheManager, hash_block
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_seq(tokens: list[int], name: str = "r", session_id: str | None = None) -> Sequence:
    return Sequence(name, tokens, SamplingParams(), session_id=session_id)


def compute(kv: KVCacheManager, seq: Sequence, cached: list[int] | None = None) -> None:
    """Allocate and 'compute' every uncomputed token of `seq`, as a step would."""
    cached = cached or []
    num_new = seq.num_tokens - seq.num_computed_tokens - len(cached) * kv.block_size
    assert kv.allocate_slots(seq, num_new, cached)
    seq.num_computed_tokens += num_new
    kv.cache_full_blocks(seq)


def admit(kv: KVCacheManager, seq: Sequence) -> list[int]:
    cached = kv.find_cached_prefix(seq)
    compute(kv, seq, cached)
    return cached


def test_hash_is_stable_and_chained() -> None:
    assert hash_block(None, [1, 2, 3, 4]) == hash_block(None, [1, 2, 3, 4])
    assert hash_block(None, [1, 2, 3, 4]) != hash_block(None, [1, 2, 3, 5])
    assert hash_block(7, [1, 2, 3, 4]) != hash_block(8, [1, 2, 3, 4])


def test_fresh_allocation_takes_lowest_free_ids() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = make_seq(list(range(10)))
    compute(kv, a)
    assert a.block_table == [0, 1, 2]
    assert [kv.blocks[i].ref_count for i in range(4)] == [1, 1, 1, 0]
    stats = kv.stats()
    assert (stats.used, stats.cached, stats.free) == (3, 0, 5)
    # Only the two full blocks are registered; the partial third is not.
    assert kv.blocks[0].block_hash is not None and kv.blocks[1].block_hash is not None
    assert kv.blocks[2].block_hash is None


def test_shared_prefix_reuses_blocks_and_counts_refs() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = make_seq(list(range(10)), "a")
    compute(kv, a)
    b = make_seq(list(range(8)) + [100, 101, 102], "b")
    assert admit(kv, b) == [0, 1]
    assert b.block_table == [0, 1, 3]
    assert kv.blocks[0].ref_count == 2 and kv.blocks[1].ref_count == 2
    kv.free(a)
    assert kv.blocks[0].ref_count == 1
    assert kv.stats().used == 3  # b's blocks 0, 1, 3
    assert 2 in kv.free_ids  # a's unregistered partial block went straight back to the free list


def test_always_leaves_one_token_to_compute() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    compute(kv, make_seq(list(range(8)), "a"))
    same = make_seq(list(range(8)), "b")
    assert kv.find_cached_prefix(same) == [0]  # not both blocks: the last token must be computed


def test_generated_tokens_fill_blocks_that_the_next_turn_reuses() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    turn1 = make_seq([1, 2, 3, 4, 5, 6], "t1")
    compute(kv, turn1)
    for token in (7, 8, 9):  # decode: sample, then compute the sampled token next step
        turn1.append_token(token)
        compute(kv, turn1)
    assert turn1.num_computed_tokens == 9
    kv.free(turn1)
    turn2 = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], "t2")
    assert admit(kv, turn2) == [0, 1]


def test_failed_allocation_changes_nothing() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(12)), "a")
    compute(kv, a)
    b = make_seq(list(range(50, 58)), "b")
    before = kv.stats()
    assert not kv.allocate_slots(b, 8)
    assert b.block_table == [] and kv.stats() == before


def test_eviction_takes_free_blocks_then_lru_tail_first() -> None:
    kv = KVCacheManager(num_blocks=6, block_size=4)
    a = make_seq(list(range(8)), "a")  # blocks 0, 1 (registered after the +1 token below)
    a.append_token(99)
    compute(kv, a)  # 9 tokens -> blocks 0, 1, 2
    b = make_seq(list(range(20, 28)) + [98], "b")
    compute(kv, b)  # blocks 3, 4, 5
    kv.free(a)  # releases 2 (partial -> free), then 1, 0 (registered -> evictable, tail first)
    kv.free(b)  # releases 5 (free), then 4, 3
    assert list(kv.free_ids) == [2, 5]
    assert list(kv.evictable) == [1, 0, 4, 3]
    c = make_seq(list(range(40, 56)), "c")  # 4 blocks: 2 free ones, then evict a's tail and head
    compute(kv, c)
    assert c.block_table == [2, 5, 1, 0]
    assert kv.find_cached_prefix(make_seq(list(range(8)) + [1], "a2")) == []
    assert kv.find_cached_prefix(make_seq(list(range(20, 28)) + [1], "b2")) == [3, 4]


def test_hit_moves_block_to_most_recently_used() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(5)), "a")
    compute(kv, a)
    b = make_seq(list(range(10, 15)), "b")
    compute(kv, b)
    kv.free(a)
    kv.free(b)
    assert list(kv.evictable) == [0, 2]
    again = make_seq(list(range(5)), "a-again")
    admit(kv, again)
    kv.free(again)
    assert list(kv.evictable) == [2, 0]


def test_session_blocks_are_evicted_after_plain_ones() -> None:
    clock = FakeClock()
    kv = KVCacheManager(num_blocks=4, block_size=4, session_idle_s=60, clock=clock)
    s = make_seq(list(range(5)), "s", session_id="chat-1")
    compute(kv, s)  # block 0 registered, block 1 partial
    kv.free(s)  # released first, but kept for its session
    p = make_seq(list(range(10, 15)), "p")
    compute(kv, p)  # blocks 2, 3 (block 1 went to the back of the free list)
    kv.free(p)
    assert list(kv.session_evictable) == [0] and list(kv.evictable) == [2]
    q = make_seq(list(range(20, 32)), "q")  # needs 3 blocks: free 1, 3 then evict plain 2
    compute(kv, q)
    assert q.block_table == [1, 3, 2]
    assert kv.find_cached_prefix(make_seq(list(range(5)), "s2")) == [0]


def test_expired_sessions_go_before_live_ones() -> None:
    clock = FakeClock()
    kv = KVCacheManager(num_blocks=3, block_size=4, session_idle_s=60, clock=clock)
    live = make_seq(list(range(10, 14)) + [0], "live", session_id="live")
    compute(kv, live)  # blocks 0 (registered), 1 (partial)
    kv.free(live)  # t=0: block 0 kept for "live"; free list is now [2, 1]
    clock.now = 10
    old = make_seq(list(range(4)) + [0], "old", session_id="old")
    compute(kv, old)  # blocks 2, 1
    kv.free(old)  # t=10: block 2 kept for "old"
    assert list(kv.session_evictable) == [0, 2]  # "live"'s block is the least recently used
    clock.now = 100
    kv.touch_session("live")  # the next turn of "live" arrives; "old" has been idle 90 s > 60
    x = make_seq(list(range(40, 48)), "x")
    assert kv.allocate_slots(x, 8)  # the free block first, then the expired session's block
    assert x.block_table == [1, 2]
    assert kv.find_cached_prefix(make_seq(list(range(10, 14)) + [0], "live2")) == [0]


def test_live_session_blocks_evicted_lru_as_last_resort() -> None:
    kv = KVCacheManager(num_blocks=2, block_size=4, session_idle_s=60, clock=FakeClock())
    for name, start in (("a", 0), ("b", 10)):
        seq = make_seq(list(range(start, start + 4)) + [0], name, session_id=name)
        assert kv.allocate_slots(seq, 4)
        seq.num_computed_tokens = 4
        kv.cache_full_blocks(seq)
        kv.free(seq)
    assert list(kv.session_evictable) == [0, 1]
    x = make_seq(list(range(20, 24)), "x")
    assert kv.allocate_slots(x, 4)
    assert x.block_table == [0]


def test_prefix_caching_off_never_hits() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a = make_seq(list(range(10)), "a")
    compute(kv, a)
    kv.free(a)
    assert kv.find_cached_prefix(make_seq(list(range(10)), "b")) == []
    assert kv.stats().free == 8


def test_block_of_an_idle_session_becomes_plain_when_released_again() -> None:
    clock = FakeClock()
    kv = KVCacheManager(num_blocks=4, block_size=4, session_idle_s=60, clock=clock)
    s = make_seq(list(range(4)) + [0], "s", session_id="idle")
    compute(kv, s)
    kv.free(s)
    assert list(kv.session_evictable) == [0]
    clock.now = 100  # the session went idle
    plain = make_seq(list(range(4)) + [1], "p")
    assert admit(kv, plain) == [0]
    kv.free(plain)
    assert list(kv.evictable) == [0] and not kv.session_evictable


def test_a_block_computed_twice_is_registered_once() -> None:
    # two requests with the same prompt admitted before either registered its blocks: the
    # second's copies stay unregistered and go straight back to the free list
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = make_seq(list(range(9)), "a")
    b = make_seq(list(range(9)), "b")
    compute(kv, a)  # blocks 0, 1 registered, 2 partial
    compute(kv, b)  # blocks 3, 4 hold the same tokens as 0, 1; 5 partial
    assert kv.hash_to_block == {a.block_hashes[0]: 0, a.block_hashes[1]: 1}
    assert kv.blocks[3].block_hash is None and kv.blocks[4].block_hash is None
    kv.free(b)
    kv.free(a)
    assert list(kv.free_ids) == [6, 7, 5, 4, 3, 2] and list(kv.evictable) == [1, 0]
    kv.check([])


def test_adopted_cached_blocks_are_not_counted_as_room() -> None:
    # 3 blocks: a's two registered blocks are cached, one is free. b reuses both cached
    # blocks; the free one is all the room left for its new tokens
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = make_seq(list(range(9)), "a")
    compute(kv, a)
    kv.free(a)
    assert list(kv.free_ids) == [2] and list(kv.evictable) == [1, 0]
    too_long = make_seq(list(range(8)) + [50] * 8, "b")  # 2 cached blocks + 2 new ones
    cached = kv.find_cached_prefix(too_long)
    assert cached == [0, 1] and not kv.allocate_slots(too_long, 8, cached)
    assert too_long.block_table == [] and list(kv.evictable) == [1, 0]
    fits = make_seq(list(range(8)) + [50] * 4, "c")  # 2 cached blocks + 1 new one
    assert kv.allocate_slots(fits, 4, kv.find_cached_prefix(fits))
    assert fits.block_table == [0, 1, 2] and not kv.evictable and not kv.free_ids
    kv.check([fits])


def test_a_shared_block_is_queued_for_eviction_when_its_last_holder_leaves() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = make_seq(list(range(9)), "a")
    compute(kv, a)  # 0, 1 registered, 2 partial
    b = make_seq(list(range(8)) + [60, 61], "b")
    admit(kv, b)  # adopts 0, 1 and takes 3
    kv.free(a)  # 0, 1 still held by b; a's partial 2 is free again
    assert not kv.evictable and [kv.blocks[i].ref_count for i in (0, 1)] == [1, 1]
    kv.check([b])
    kv.free(b)  # b's partial 3 is free; 1, 0 queued, tail first
    assert list(kv.evictable) == [1, 0] and list(kv.free_ids)[-2:] == [2, 3]
    kv.check([])


def test_releasing_a_block_more_often_than_it_was_taken_is_caught() -> None:
    # a bug that copied a block table without taking references
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(5)), "a")
    compute(kv, a)
    stray = make_seq(list(range(5)), "stray")
    stray.block_table = list(a.block_table)
    kv.free(a)
    with pytest.raises(AssertionError, match="block 1 released more often than taken"):
        kv.free(stray)


def test_taking_a_block_that_is_still_held_is_caught() -> None:
    # a bug that put a held block back on the free list
    kv = KVCacheManager(num_blocks=2, block_size=4)
    a = make_seq(list(range(3)), "a")
    compute(kv, a)  # block 0
    kv.free_ids.appendleft(0)
    with pytest.raises(AssertionError, match="block 0 taken while held"):
        kv.allocate_slots(make_seq([7, 7], "b"), 2)


def test_check_finds_a_block_in_two_places() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(5)), "a")
    compute(kv, a)
    kv.check([a])
    kv.free(a)
    kv.free_ids.append(0)  # registered, queued for eviction, and now "free" too
    with pytest.raises(AssertionError, match="block 0 is in 2 places"):
        kv.check([])


def test_check_finds_a_block_held_without_a_reference() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = make_seq(list(range(5)), "a")
    compute(kv, a)
    stray = make_seq(list(range(5)), "stray")
    stray.block_table = list(a.block_table)  # a copied table: blocks 0, 1 held twice, counted once
    with pytest.raises(AssertionError, match="block 0 is held 2 times"):
        kv.check([a, stray])
