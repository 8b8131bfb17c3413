"""Which endpoint holds which block: the picker's map of the fleet's prefix caches.

Two sources write it. KV events say exactly what a replica stored and evicted
(`gateway/fleet/kv_subscriber.py`). The gateway's own record says what it sent where: a
prompt routed to a replica will be in that replica's cache once its prefill runs. Without
events the record is all there is; with them it still covers the prefills not yet reported.
Each endpoint's entries are kept in least-recently-used order and bounded by that replica's
cache size, so the record forgets what the replica's LRU would have evicted by now.

A replica with a second KV tier (`headstart engine --kv-offload-mb`, vLLM's offloading) says
where a block sits: `GPU` (its pool) or `CPU`/`DISK` (the tier). A block is held while any
medium holds it; `in_tier_only` counts the blocks of a match that would be loaded back
rather than read in place, which the picker charges at their reload cost.

Pure bookkeeping (no I/O, no clock), shared by the live gateway and the fleet simulator.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

DEFAULT_CAPACITY_BLOCKS = 16_384
_NONE: frozenset[str] = frozenset()
POOL, TIER = 1, 2  # where an endpoint holds a block: bits of its entry
POOL_MEDIUM = "GPU"  # vLLM's name for a replica's pool in KV events


def medium_bit(medium: str) -> int:
    return POOL if medium == POOL_MEDIUM else TIER


class BlockLocator:
    """Block key -> the endpoints holding it, each endpoint's keys in LRU order with the
    media (`POOL`, `TIER` bits) it holds them in."""

    def __init__(self, capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        self.default_capacity = capacity_blocks
        self._holders: dict[int, set[str]] = {}
        self._lru: dict[str, OrderedDict[int, int]] = {}
        self._capacity: dict[str, int] = {}

    def set_capacity(self, endpoint: str, blocks: int) -> None:
        """Bound `endpoint`'s entries (its KV cache size in blocks, e.g. scraped)."""
        self._capacity[endpoint] = max(1, blocks)
        self._trim(endpoint)

    def add(self, endpoint: str, keys: Iterable[int], medium: str = POOL_MEDIUM) -> None:
        """`endpoint` holds `keys` in `medium` (now the most recently used, in order)."""
        bit = medium_bit(medium)
        lru = self._lru.setdefault(endpoint, OrderedDict())
        for key in keys:
            if key in lru:
                lru[key] |= bit
                lru.move_to_end(key)
                continue
            lru[key] = bit
            holders = self._holders.get(key)
            if holders is None:
                self._holders[key] = {endpoint}
            else:
                holders.add(endpoint)
        self._trim(endpoint)

    def remove(self, endpoint: str, keys: Iterable[int], medium: str = POOL_MEDIUM) -> None:
        """`endpoint` no longer holds `keys` in `medium` (maybe still in another)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            return
        bit = medium_bit(medium)
        for key in keys:
            media = lru.get(key)
            if media is None:
                continue
            if media & ~bit:
                lru[key] = media & ~bit
            else:
                del lru[key]
                self._drop_holder(key, endpoint)

    def clear(self, endpoint: str) -> None:
        """Forget everything `endpoint` held (it restarted, or left the fleet)."""
        for key in self._lru.pop(endpoint, ()):
            self._drop_holder(key, endpoint)

    def matches(self, keys: Sequence[int]) -> dict[str, int]:
        """For each endpoint holding the first block: how many leading blocks it holds."""
        matched: dict[str, int] = {}
        alive: set[str] = set()
        for depth, key in enumerate(keys):
            holders = self._holders.get(key, _NONE)
            if depth == 0:
                alive = set(holders)
            else:
                kept = alive & holders
                for gone in alive - kept:
                    matched[gone] = depth  # held blocks 0 .. depth-1
                alive = kept
            if not alive:
                return matched
        for endpoint in alive:
            matched[endpoint] = len(keys)
        return matched

    def in_tier_only(self, endpoint: str, keys: Sequence[int]) -> int:
        """How many of `keys` `endpoint` holds in its second tier and not in its pool."""
        lru = self._lru.get(endpoint, {})
        return sum(1 for key in keys if lru.get(key) == TIER)

    def held(self, endpoint: str) -> int:
        """How many blocks `endpoint` is recorded to hold."""
        return len(self._lru.get(endpoint, ()))

    def holds(self, endpoint: str, key: int) -> bool:
        return key in self._lru.get(endpoint, ())

    # ---------------------------------------------------------------- internals

    def _trim(self, endpoint: str) -> None:
        lru = self._lru.get(endpoint)
        if lru is None:
            return
        limit = self._capacity.get(endpoint, self.default_capacity)
        while len(lru) > limit:
            key, _ = lru.popitem(last=False)
            self._drop_holder(key, endpoint)

    def _drop_holder(self, key: int, endpoint: str) -> None:
        holders = self._holders.get(key)
        if holders is not None:
            holders.discard(endpoint)
            if not holders:
                del self._holders[key]
