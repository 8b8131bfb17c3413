"""The second KV tier's bookkeeping: which evicted blocks it keeps, in which slot, and the
copies still owed between it and the pool.

Plain Python, no tensors (the copies are a `TierStore`'s, engine/kv_tier_store.py): the block
manager calls `offload` when a registered block leaves the pool and `reload` when a request
adopts a block the tier holds; both only queue a copy. `flush()` runs the queued copies in
the order they were queued, before the step that reads or overwrites those pool blocks:

    step:  schedule (evictions queue saves, adoptions queue loads)  ->  flush  ->  model run

The tier keeps a copy after a reload (it is inclusive), so a block evicted again costs no
second save. Full, it drops its least recently used entry: plain prefixes before the blocks
of sessions (a session's next turn is the likeliest reuse, so sessions spill here first and
stay longest), and never an entry a queued load still reads (`_pinned`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol


class TierStore(Protocol):
    """Moves block contents between the pool tensor and the tier's slots."""

    medium: str  # vLLM's name for where the blocks sit: CPU (host RAM) or DISK
    bytes_per_block: int  # what one block costs the tier

    def save(self, block_ids: list[int], slots: list[int]) -> None: ...

    def load(self, slots: list[int], block_ids: list[int]) -> None: ...


@dataclass
class Offload:
    """What `offload` did: whether the block is now in the tier, and the entries it dropped
    to make room (their hashes), for the KV events."""

    stored: bool
    dropped: list[int] = field(default_factory=list)


@dataclass
class TierStats:
    blocks: int  # entries held
    capacity: int  # slots
    saved: int  # blocks copied from the pool into the tier
    reloaded: int  # blocks copied back into the pool
    bytes_saved: int
    bytes_reloaded: int


class SecondTier:
    """`capacity` slots of one block each, on `store`'s medium."""

    def __init__(self, capacity: int, store: TierStore) -> None:
        assert capacity > 0, "a second tier needs at least one slot"
        self.capacity = capacity
        self.store = store
        self.medium = store.medium
        self.free_slots: list[int] = list(range(capacity - 1, -1, -1))  # pop() takes slot 0 first
        self.slot_of: dict[int, int] = {}  # block hash -> slot
        self.plain: OrderedDict[int, None] = OrderedDict()  # hashes, least recently used first
        self.sessions: OrderedDict[int, None] = OrderedDict()  # a live session's blocks
        self._pinned: set[int] = set()  # slots a queued load reads
        self._queue: list[tuple[str, int, int]] = []  # ("save", block_id, slot) | ("load", ...)
        self.saved = self.reloaded = 0

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self.slot_of

    def __len__(self) -> int:
        return len(self.slot_of)

    def offload(self, block_id: int, block_hash: int, session: bool) -> Offload:
        """Pool block `block_id` (holding `block_hash`) is being evicted: keep its content
        (queue the save). A block of a live session goes to the session line."""
        if block_hash in self.slot_of:  # kept from an earlier trip: nothing to copy
            self._touch(block_hash, session)
            return Offload(stored=True)
        dropped = []
        if not self.free_slots:
            victim = self._victim()
            if victim is None:
                return Offload(stored=False)  # every slot is read this step
            self._drop(victim)
            dropped.append(victim)
        slot = self.free_slots.pop()
        self.slot_of[block_hash] = slot
        self._touch(block_hash, session)
        self._queue.append(("save", block_id, slot))
        self.saved += 1
        return Offload(stored=True, dropped=dropped)

    def pin(self, block_hash: int) -> None:
        """Keep `block_hash` until the next flush: a request is about to load it."""
        self._pinned.add(self.slot_of[block_hash])

    def reload(self, block_hash: int, block_id: int) -> None:
        """Copy the tier's `block_hash` into pool block `block_id` before the next step."""
        slot = self.slot_of[block_hash]
        self._pinned.add(slot)
        self._touch(block_hash, block_hash in self.sessions)
        self._queue.append(("load", slot, block_id))
        self.reloaded += 1

    def flush(self) -> None:
        """Run the queued copies in order, consecutive ones of a kind as one batch."""
        queue, self._queue = self._queue, []
        i = 0
        while i < len(queue):
            kind = queue[i][0]
            j = i
            while j < len(queue) and queue[j][0] == kind:
                j += 1
            sources = [a for _, a, _ in queue[i:j]]
            targets = [b for _, _, b in queue[i:j]]
            if kind == "save":
                self.store.save(sources, targets)
            else:
                self.store.load(sources, targets)
            i = j
        self._pinned.clear()

    def stats(self) -> TierStats:
        size = self.store.bytes_per_block
        return TierStats(len(self.slot_of), self.capacity, self.saved, self.reloaded,
                         self.saved * size, self.reloaded * size)

    def check(self) -> None:
        """Every slot free or held by exactly one hash in exactly one line (tests)."""
        held = set(self.slot_of.values())
        assert len(held) == len(self.slot_of), "two hashes share a slot"
        assert held.isdisjoint(self.free_slots), "a held slot is on the free list"
        assert len(held) + len(self.free_slots) == self.capacity, "a slot went missing"
        assert set(self.plain).isdisjoint(self.sessions), "a hash is in both lines"
        assert set(self.plain) | set(self.sessions) == set(self.slot_of), "lines and slots differ"

    # ---------------------------------------------------------------- internals

    def _touch(self, block_hash: int, session: bool) -> None:
        self.plain.pop(block_hash, None)
        self.sessions.pop(block_hash, None)
        (self.sessions if session else self.plain)[block_hash] = None

    def _victim(self) -> int | None:
        """The least recently used entry no queued load reads: plain ones first."""
        for line in (self.plain, self.sessions):
            for block_hash in line:
                if self.slot_of[block_hash] not in self._pinned:
                    return block_hash
        return None

    def _drop(self, block_hash: int) -> None:
        slot = self.slot_of.pop(block_hash)
        self.plain.pop(block_hash, None)
        self.sessions.pop(block_hash, None)
        self.free_slots.append(slot)
