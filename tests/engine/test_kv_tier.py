"""The second KV tier's bookkeeping with tiny sizes and a fake store: which block goes to
which slot, the copies queued and their order, what a full tier drops, and the events."""

from __future__ import annotations

from engine.block_manager import KVCacheManager
from engine.kv_tier import SecondTier, TierStats
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


class FakeStore:
    """Block contents as labels: the pool's `pool[block_id]`, the tier's `slots[slot]`."""

    medium = "CPU"
    bytes_per_block = 100

    def __init__(self) -> None:
        self.pool: dict[int, object] = {}
        self.slots: dict[int, object] = {}
        self.calls: list[tuple[str, list[int], list[int]]] = []

    def save(self, block_ids: list[int], slots: list[int]) -> None:
        self.calls.append(("save", block_ids, slots))
        for b, s in zip(block_ids, slots, strict=True):
            self.slots[s] = self.pool[b]

    def load(self, slots: list[int], block_ids: list[int]) -> None:
        self.calls.append(("load", slots, block_ids))
        for s, b in zip(slots, block_ids, strict=True):
            self.pool[b] = self.slots[s]


class Events:
    def __init__(self) -> None:
        self.log: list[tuple] = []

    def block_stored(self, seq: Sequence, index: int) -> None:
        self.log.append(("stored", seq.request_id, index))

    def block_offloaded(self, block_hash: int, medium: str) -> None:
        self.log.append(("offloaded", block_hash, medium))

    def block_removed(self, block_hash: int, medium: str = "GPU") -> None:
        self.log.append(("removed", block_hash, medium))


def make(num_blocks: int = 4, slots: int = 8) -> tuple[KVCacheManager, FakeStore]:
    store = FakeStore()
    return KVCacheManager(num_blocks, 4, tier=SecondTier(slots, store)), store


def run(kv: KVCacheManager, store: FakeStore, tokens: list[int], name: str,
        session: str | None = None) -> Sequence:
    """Admit, 'compute' (each new block's content is its hash) and free one sequence."""
    seq = Sequence(name, tokens, SamplingParams(), session_id=session)
    cached = kv.find_cached_prefix(seq)
    assert kv.allocate_slots(seq, seq.num_tokens - len(cached) * 4, cached)
    kv.tier.flush()
    for i, block_id in enumerate(seq.block_table):
        if i >= len(cached) and i < len(seq.block_hashes):
            store.pool[block_id] = seq.block_hashes[i]
    seq.num_computed_tokens = seq.num_tokens
    kv.cache_full_blocks(seq)
    seq.num_cached_tokens = len(cached) * 4
    kv.free(seq)
    kv.check([])
    kv.tier.check()
    return seq


def test_an_evicted_prefix_comes_back_from_the_tier_instead_of_being_recomputed():
    kv, store = make()  # 4 blocks of 4 tokens, 8 slots
    a = run(kv, store, list(range(13)), "a")  # blocks 0-2 registered, 3 the partial tail
    assert list(kv.evictable) == [2, 1, 0]  # released tail first
    run(kv, store, list(range(100, 113)), "b")  # takes free block 3, then evicts 2, 1, 0
    assert store.calls == [("save", [2, 1, 0], [0, 1, 2])]
    store.calls.clear()
    again = Sequence("probe", list(range(13)), SamplingParams())
    assert kv.find_cached_prefix(again) == [None, None, None]  # all three in the tier
    a2 = run(kv, store, list(range(13)), "a2")
    assert a2.num_cached_tokens == 12  # reported cached: loaded back, not recomputed
    # fresh blocks for the three: free 0, then b's registered 1 and 2 evicted (saved
    # first); the loads; then the tail block evicts b's 3 (saved after)
    assert store.calls == [("save", [1, 2], [3, 4]), ("load", [2, 1, 0], [0, 1, 2]),
                           ("save", [3], [5])]
    assert [store.pool[b] for b in (0, 1, 2)] == a.block_hashes[:3]
    assert kv.tier.stats() == TierStats(6, 8, 6, 3, 600, 300)


def test_a_full_tier_drops_plain_blocks_before_session_blocks_and_never_a_pinned_one():
    tier = SecondTier(2, FakeStore())
    assert tier.offload(0, 10, session=True).dropped == []
    assert tier.offload(1, 11, session=False).dropped == []
    assert tier.offload(2, 12, session=False).dropped == [11]  # the plain one, though newer
    assert tier.offload(3, 13, session=False).dropped == [12]
    tier.pin(13)
    assert tier.offload(4, 14, session=False).dropped == [10]  # 13 is read this step
    tier.pin(14)
    assert tier.offload(5, 15, session=False).stored is False  # every slot is read
    assert set(tier.slot_of) == {13, 14}
    tier.check()


def test_a_block_the_tier_already_holds_is_not_copied_again():
    tier = SecondTier(4, store := FakeStore())
    store.pool[7] = "content"
    tier.offload(7, 70, session=False)
    tier.flush()
    tier.reload(70, 3)
    tier.flush()
    assert store.pool[3] == "content"
    assert tier.offload(3, 70, session=False).stored  # evicted again: kept, no copy
    tier.flush()
    assert [c[0] for c in store.calls] == ["save", "load"]
    assert tier.stats().saved == 1 and tier.stats().bytes_reloaded == 100


def test_a_failed_allocation_leaves_the_tier_untouched():
    kv, store = make(num_blocks=4)
    run(kv, store, list(range(13)), "a")
    run(kv, store, list(range(100, 113)), "b")
    big = Sequence("big", list(range(13)) + list(range(200, 230)), SamplingParams())
    cached = kv.find_cached_prefix(big)
    before = (dict(kv.tier.slot_of), len(kv.tier._queue), kv.tier.reloaded)
    assert not kv.allocate_slots(big, big.num_tokens - 12, cached)  # 11 blocks, pool of 4
    assert (dict(kv.tier.slot_of), len(kv.tier._queue), kv.tier.reloaded) == before
    assert big.block_table == [] and big.num_computed_tokens == 0


def test_events_say_where_a_block_went_the_tier_before_the_pool():
    kv, store = make(num_blocks=4, slots=1)
    kv.events = events = Events()
    a = run(kv, store, list(range(13)), "a")
    b = run(kv, store, list(range(100, 113)), "b")  # evicts a's blocks 2, 1, 0
    a0, a1, a2 = a.block_hashes[:3]
    assert events.log == [
        ("stored", "a", 0), ("stored", "a", 1), ("stored", "a", 2),
        ("offloaded", a2, "CPU"), ("removed", a2, "GPU"),
        ("removed", a2, "CPU"), ("offloaded", a1, "CPU"), ("removed", a1, "GPU"),  # one slot
        ("removed", a1, "CPU"), ("offloaded", a0, "CPU"), ("removed", a0, "GPU"),
        ("stored", "b", 0), ("stored", "b", 1), ("stored", "b", 2)]
    assert b.block_hashes[0] not in kv.tier
    events.log.clear()
    run(kv, store, [0, 1, 2, 3, 9], "a-again")  # a's first block, back from the tier
    assert ("stored", "a-again", 0) in events.log


def test_a_live_session_spills_to_the_session_line_and_stays_longest():
    kv, store = make(num_blocks=4, slots=3)
    chat = run(kv, store, list(range(9)), "turn-1", session="s1")  # blocks 0, 1 registered
    run(kv, store, list(range(100, 113)), "other")  # takes every block: the session's go too
    assert set(kv.tier.sessions) == set(chat.block_hashes[:2]) and not kv.tier.plain
    run(kv, store, list(range(200, 213)), "more")  # evicts other's three into the last slot
    assert set(kv.tier.sessions) == set(chat.block_hashes[:2])  # plain ones dropped instead
    assert len(kv.tier.plain) == 1
