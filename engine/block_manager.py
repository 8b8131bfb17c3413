"""Paged KV cache bookkeeping: block tables, prefix reuse by chained block hashes, eviction.

Plain Python, no tensors: the runner owns the cache tensor, this class only decides which
block ids a sequence writes to. A full block is identified by hash(parent hash, its token
ids), so two requests sharing a prefix share the blocks of that prefix, and blocks filled
by generated tokens are found again by the next turn of the conversation.

Every block is in exactly one place: referenced by live sequences (`ref_count > 0`), on the
free list (holds nothing reusable), or queued for eviction (unreferenced, registered, still
reusable). Cheap assertions guard each move between them; `check(live)` audits the whole
pool (tests call it after every step).

With a second tier (`tier`, engine/kv_tier.py) an evicted block's content is kept there
instead of dropped, and a prefix found there counts as cached: adopting it takes a fresh
block, registers it at once and queues the copy back, which lands before the step runs.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Protocol

from engine.block_hash import extend_block_hashes, hash_block, salt_root
from engine.kv_tier import SecondTier
from engine.sequence import Sequence

MAX_TRACKED_SESSIONS = 4096
__all__ = ["BlockEvents", "KVCacheManager", "KVCacheStats", "hash_block", "salt_root"]
POOL_MEDIUM = "GPU"  # vLLM's name for the pool's blocks in KV events, whatever the device


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None  # set once the block is full, computed and registered
    session_id: str | None = None  # the session that last released it (kept for that session)


class BlockEvents(Protocol):
    """Told, on the step thread, when a full block becomes reusable in the pool
    (`block_stored`: block `index` of `seq`), when a second tier takes one
    (`block_offloaded`, its medium) and when a medium loses one (`block_removed`);
    engine/kv_events.py publishes them. Must be quick: it runs inside the step."""

    def block_stored(self, seq: Sequence, index: int) -> None: ...

    def block_offloaded(self, block_hash: int, medium: str) -> None: ...

    def block_removed(self, block_hash: int, medium: str = POOL_MEDIUM) -> None: ...


@dataclass
class KVCacheStats:
    total: int
    used: int  # referenced by a live sequence
    cached: int  # unreferenced, holds a registered prefix, reusable until evicted
    free: int  # holds nothing reusable


class KVCacheManager:
    """A pool of `num_blocks` blocks of `block_size` tokens; see the module docstring."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 session_idle_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic,
                 tier: SecondTier | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.session_idle_s = session_idle_s
        self.clock = clock
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: deque[int] = deque(range(num_blocks))
        # Unreferenced registered blocks, least recently released first.
        self.evictable: OrderedDict[int, None] = OrderedDict()
        self.session_evictable: OrderedDict[int, None] = OrderedDict()
        self.hash_to_block: dict[int, int] = {}
        self.session_last_seen: dict[str, float] = {}
        self.events: BlockEvents | None = None  # KV events (`headstart engine --kv-events`)
        self.tier = tier  # where evicted blocks go (`--kv-offload-mb`); None: dropped

    # ------------------------------------------------------------ prefix lookup

    def compute_block_hashes(self, seq: Sequence) -> list[int]:
        """Extend `seq.block_hashes` to cover every full block of its tokens."""
        return extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size,
                                   seq.cache_salt)

    def find_cached_prefix(self, seq: Sequence) -> list[int | None]:
        """The longest cached prefix of `seq`, leaving >= 1 token to compute: per block, the
        pool block holding it, or None where the second tier holds it."""
        if not self.enable_prefix_caching:
            return []
        hashes = self.compute_block_hashes(seq)
        # only full blocks before the last token: that one is computed to sample the next
        #   8 tokens, bs 4:  [0 1 2 3][4 5 6 7]      (8 - 1) // 4 = 1 block reusable
        #   9 tokens, bs 4:  [0 1 2 3][4 5 6 7][8]   (9 - 1) // 4 = 2 blocks reusable
        limit = (seq.num_tokens - 1) // self.block_size
        found: list[int | None] = []
        for h in hashes[:limit]:
            block_id = self.hash_to_block.get(h)
            if block_id is None and (self.tier is None or h not in self.tier):
                break
            found.append(block_id)
        return found

    # ------------------------------------------------------------ allocation

    @property
    def num_allocatable(self) -> int:
        return len(self.free_ids) + len(self.evictable) + len(self.session_evictable)

    def allocate_slots(self, seq: Sequence, num_new_tokens: int,
                       cached_blocks: Seq[int | None] = ()) -> bool:
        """Give `seq` room for `num_new_tokens` more tokens, first adopting `cached_blocks`
        (`find_cached_prefix`: a None is loaded back from the second tier into a fresh block).

        Returns False (changing nothing) when the pool cannot hold them.
        """
        bs = self.block_size
        # blocks to take = ceil(total / bs) - blocks held - blocks adopted; e.g. bs 4,
        # 6 computed, 5 new (11 in all -> 3 blocks), 2 held -> take 1:
        #   [0 1 2 3][4 5 6 7][8 9 10 _]
        #    computed ----|new ------->
        #    held ------------|taken ---|
        # (0 or fewer: the last held block still has room)
        total_tokens = seq.num_computed_tokens + len(cached_blocks) * bs + num_new_tokens
        num_needed = -(-total_tokens // bs) - len(seq.block_table) - len(cached_blocks)
        reloads = [i for i, b in enumerate(cached_blocks) if b is None]
        reclaimable = sum(1 for b in cached_blocks if b is not None
                          and self.blocks[b].ref_count == 0)
        if max(num_needed, 0) + len(reloads) > self.num_allocatable - reclaimable:
            return False
        adopted = list(cached_blocks)
        for block_id in adopted:
            if block_id is not None:
                self._acquire(block_id)
        if reloads:
            self._reload(seq, adopted, reloads)
        seq.block_table.extend(adopted)
        seq.num_computed_tokens += len(cached_blocks) * bs
        if cached_blocks:  # adopted blocks are registered already
            seq.num_committed_blocks = len(seq.block_table)
        for _ in range(max(num_needed, 0)):
            seq.block_table.append(self._take_block())
        assert len(seq.block_table) * bs >= seq.num_computed_tokens + num_new_tokens, \
            f"{seq}: {len(seq.block_table)} blocks cannot hold {num_new_tokens} more tokens"
        if seq.session_id is not None:
            self.touch_session(seq.session_id)
        return True

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the blocks `seq` has completely computed so later requests can reuse them."""
        if not self.enable_prefix_caching:
            return
        num_full = seq.num_computed_tokens // self.block_size
        assert num_full <= len(seq.block_table), f"{seq}: computed tokens outside its blocks"
        if num_full <= seq.num_committed_blocks:
            return
        hashes = self.compute_block_hashes(seq)
        for i in range(seq.num_committed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.block_hash is None and hashes[i] not in self.hash_to_block:
                block.block_hash = hashes[i]
                self.hash_to_block[hashes[i]] = block.block_id
                if self.events is not None:
                    self.events.block_stored(seq, i)
        seq.num_committed_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq`; registered ones stay reusable until evicted."""
        for block_id in reversed(seq.block_table):  # tail first: evicted before the prefix
            self._release(block_id, seq.session_id)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_committed_blocks = 0
        if seq.session_id is not None:
            self.touch_session(seq.session_id)

    # ------------------------------------------------------------ KV handover

    def pool_blocks(self, hashes: Seq[int]) -> list[int]:
        """The pool blocks holding the leading run of `hashes` (another engine asks for
        them: engine/kv_handover.py); stops at the first the pool does not hold."""
        found = []
        for h in hashes:
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            found.append(block_id)
        return found

    def import_blocks(self, seq: Sequence, first: int, count: int) -> list[tuple[int, int]]:
        """Make room for blocks `first`..`first + count - 1` of `seq`, computed by another
        engine: a fresh block each, registered now and queued as cached (tail first, as
        `free` leaves them), so the sequence adopts them as a prefix hit when admitted.
        Returns (block index, block id) of the blocks the caller must fill before the next
        step; a block the pool holds already is skipped, and the run stops where the
        free and evictable blocks run out (the rest is computed)."""
        hashes = self.compute_block_hashes(seq)[:first + count]
        held = [self.hash_to_block[h] for h in hashes if h in self.hash_to_block]
        for block_id in held:  # the prefix the pool holds stays while fresh blocks are taken
            self._acquire(block_id)
        wanted = [i for i in range(first, len(hashes)) if hashes[i] not in self.hash_to_block]
        taken = [(i, self._take_block()) for i in wanted[:self.num_allocatable]]
        for i, block_id in taken:  # registered once all are taken: none evicts another
            self.blocks[block_id].block_hash = hashes[i]
            self.hash_to_block[hashes[i]] = block_id
            if self.events is not None:
                self.events.block_stored(seq, i)
        for block_id in [*reversed([b for _, b in taken]), *reversed(held)]:
            self._release(block_id, None)
        return taken

    def touch_session(self, session_id: str) -> None:
        """Mark a session active now: its released blocks are kept for `session_idle_s`."""
        now = self.clock()
        self.session_last_seen[session_id] = now
        if len(self.session_last_seen) > MAX_TRACKED_SESSIONS:  # forget idle sessions
            self.session_last_seen = {sid: t for sid, t in self.session_last_seen.items()
                                      if now - t <= self.session_idle_s}

    def stats(self) -> KVCacheStats:
        cached = len(self.evictable) + len(self.session_evictable)
        free = len(self.free_ids)
        return KVCacheStats(total=self.num_blocks, used=self.num_blocks - cached - free,
                            cached=cached, free=free)

    def check(self, live: Iterable[Sequence]) -> None:
        """Audit the pool against `live`, every sequence holding blocks: each block in
        exactly one place, held as often as the block tables name it, registered exactly
        when the hash index points at it. O(blocks): for tests and debugging."""
        live = list(live)
        held = Counter(block_id for seq in live for block_id in seq.block_table)
        free = Counter(self.free_ids)
        for block in self.blocks:
            i = block.block_id
            places = (held[i] > 0) + free[i] + (i in self.evictable) + (i in self.session_evictable)
            assert places == 1, f"block {i} is in {places} places: {block}"
            assert block.ref_count == held[i], f"block {i} is held {held[i]} times: {block}"
            if held[i] == 0:  # free blocks hold nothing; queued ones a registered prefix
                assert (block.block_hash is None) == (free[i] == 1), f"block {i}: {block}"
            if block.block_hash is not None:
                assert self.hash_to_block.get(block.block_hash) == i, f"block {i}: not indexed"
        for block_hash, i in self.hash_to_block.items():
            assert self.blocks[i].block_hash == block_hash, f"index points at block {i}"
        for seq in live:
            assert seq.num_computed_tokens <= len(seq.block_table) * self.block_size, seq
            assert seq.num_committed_blocks <= len(seq.block_table), seq

    # ------------------------------------------------------------ internals

    def _reload(self, seq: Sequence, adopted: list[int | None], reloads: list[int]) -> None:
        """Fill `adopted`'s tier hits (at `reloads`, the first blocks of `seq`): a fresh
        block each, registered now, its content queued to come back from the tier. The
        tier keeps them until the flush, whatever the fresh blocks evict."""
        assert self.tier is not None and not seq.block_table, f"{seq}: reload mid-sequence"
        for i in reloads:
            self.tier.pin(seq.block_hashes[i])
        for i in reloads:
            adopted[i] = self._take_block()
        for i in reloads:
            block_hash, block = seq.block_hashes[i], self.blocks[adopted[i]]
            assert block_hash not in self.hash_to_block, f"block {i} of {seq} is in the pool"
            block.block_hash = block_hash
            self.hash_to_block[block_hash] = block.block_id
            self.tier.reload(block_hash, block.block_id)
            if self.events is not None:
                self.events.block_stored(seq, i)

    def _release(self, block_id: int, session_id: str | None) -> None:
        """Drop one reference; a block nobody holds goes back to the free list (nothing
        reusable) or to an eviction queue, the sessions' while `session_id` (or its own,
        still live) holds it."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        assert block.ref_count >= 0, f"block {block_id} released more often than taken"
        if block.ref_count > 0:
            return
        if block.block_hash is None:
            self.free_ids.append(block_id)
            return
        if session_id is not None:
            block.session_id = session_id
        elif block.session_id is not None and not self._session_live(block.session_id):
            block.session_id = None  # its session went idle: an ordinary cached block now
        if block.session_id is not None:
            self.session_evictable[block_id] = None
        else:
            self.evictable[block_id] = None

    def _acquire(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:  # a cached block nobody holds leaves the eviction queues
            queued = self.evictable.pop(block_id, 0) is None
            queued |= self.session_evictable.pop(block_id, 0) is None
            assert queued and block.block_hash is not None, \
                f"block {block_id} adopted but neither held nor cached"
        block.ref_count += 1

    def _take_block(self) -> int:
        block_id = self.free_ids.popleft() if self.free_ids else self._evict()
        block = self.blocks[block_id]
        assert block.ref_count == 0 and block.block_hash is None, \
            f"block {block_id} taken while held or registered: {block}"
        block.ref_count = 1
        return block_id

    def _evict(self) -> int:
        """Plain blocks first (LRU), then blocks of expired sessions, then live sessions (LRU)."""
        if self.evictable:
            block_id, _ = self.evictable.popitem(last=False)
        else:
            block_id = self._oldest_expired_session_block()
            if block_id is None:
                block_id, _ = self.session_evictable.popitem(last=False)
            else:
                del self.session_evictable[block_id]
        block = self.blocks[block_id]
        if block.block_hash is not None and self.hash_to_block.get(block.block_hash) == block_id:
            del self.hash_to_block[block.block_hash]
            self._offload(block)
            if self.events is not None:
                self.events.block_removed(block.block_hash)
        block.block_hash = None
        block.session_id = None
        return block_id

    def _offload(self, block: Block) -> None:
        """Keep an evicted block's content in the second tier (its events go out before the
        pool's removal, so a follower never loses track of the block in between)."""
        if self.tier is None or block.block_hash is None:
            return
        session = block.session_id is not None and self._session_live(block.session_id)
        done = self.tier.offload(block.block_id, block.block_hash, session)
        if self.events is not None:
            for dropped in done.dropped:
                self.events.block_removed(dropped, self.tier.medium)
            if done.stored:
                self.events.block_offloaded(block.block_hash, self.tier.medium)

    def _session_live(self, session_id: str) -> bool:
        last = self.session_last_seen.get(session_id)
        return last is not None and self.clock() - last <= self.session_idle_s

    def _oldest_expired_session_block(self) -> int | None:
        for block_id in self.session_evictable:
            if not self._session_live(self.blocks[block_id].session_id):
                return block_id
        return None
