"""Every gateway follows every replica's KV events, so any number of gateways agree on where
a prefix lives without talking to each other.

`KVEventSubscriber` keeps one ZeroMQ SUB socket per replica (a SUB socket cannot tell its
publishers apart) and hands each batch to `EventTranslator`, which turns the replica's
block hashes into the picker's block keys (`block_keys.py`) from the token ids each
`BlockStored` carries: a key is the block's tokens chained to its parent's key, so it does
not matter how the replica hashes (the bundled engine and vLLM differ). A block whose parent
was stored before this gateway subscribed cannot be placed and is skipped; a replica whose
sequence numbers restart (it restarted) is forgotten first. A block a replica moves to its
second tier comes as a `BlockStored` on that medium without tokens: it is placed by the
hash it was first stored under, and its translation is kept while any medium holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from engine import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    decode_batch,
    hash_block,
)
from gateway.fleet.block_keys import root_key
from gateway.fleet.block_locator import BlockLocator

log = logging.getLogger("headstart.gateway")
MAX_TRANSLATIONS = 1 << 20  # per replica; far above any replica's block count


class EventTranslator:
    """Applies a replica's events to the locator, keyed as the picker keys prompts."""

    def __init__(self, locator: BlockLocator, block_size: int) -> None:
        self.locator = locator
        self.block_size = block_size
        self._keys: dict[str, dict[Any, int]] = {}  # replica -> its hash -> our key
        self.unplaced = 0  # blocks whose parent was never seen
        self.events = 0

    def apply(self, endpoint: str, events: list[KVEvent]) -> None:
        keys = self._keys.setdefault(endpoint, {})
        for event in events:
            self.events += 1
            if isinstance(event, BlockStored):
                self._stored(endpoint, keys, event)
            elif isinstance(event, BlockRemoved):
                self._removed(endpoint, keys, event)
            elif isinstance(event, AllBlocksCleared):
                self.reset(endpoint)
                keys = self._keys.setdefault(endpoint, {})

    def reset(self, endpoint: str) -> None:
        """`endpoint` holds nothing (it cleared its cache, or restarted)."""
        self._keys.pop(endpoint, None)
        self.locator.clear(endpoint)

    def _removed(self, endpoint: str, keys: dict[Any, int], event: BlockRemoved) -> None:
        known = [(h, k) for h in event.block_hashes if (k := keys.get(h)) is not None]
        self.locator.remove(endpoint, [k for _, k in known], event.medium)
        for block_hash, key in known:
            if not self.locator.holds(endpoint, key):
                del keys[block_hash]  # gone from every medium

    def _stored(self, endpoint: str, keys: dict[Any, int], event: BlockStored) -> None:
        if not event.token_ids:  # a known block moved to another medium (a second tier)
            moved = [k for h in event.block_hashes if (k := keys.get(h)) is not None]
            self.unplaced += len(event.block_hashes) - len(moved)
            self.locator.add(endpoint, moved, event.medium)
            return
        if event.block_size != self.block_size:
            self.unplaced += len(event.block_hashes)
            return
        if event.parent_block_hash is None:
            parent = None
        else:
            parent = keys.get(event.parent_block_hash)
            if parent is None:
                self.unplaced += len(event.block_hashes)
                return
        placed = []
        for i, (block_hash, tokens, extra) in enumerate(event.blocks()):
            if len(tokens) != self.block_size:
                break
            if i == 0 and parent is None:
                parent = root_key(extra)
            parent = hash_block(parent, tokens)
            keys[block_hash] = parent
            placed.append(parent)
        self.locator.add(endpoint, placed, event.medium)
        while len(keys) > MAX_TRANSLATIONS:  # removals missed: drop the oldest
            del keys[next(iter(keys))]


class KVEventSubscriber:
    """One SUB socket per replica with a ZeroMQ address; see the module docstring."""

    def __init__(self, translator: EventTranslator,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.translator = translator
        self.on_event = on_event
        self._ctx = zmq.asyncio.Context.instance()
        self._tasks: dict[str, asyncio.Task] = {}
        self.gaps = 0  # batches lost between two received ones

    def follow(self, endpoint: str, address: str) -> None:
        if endpoint not in self._tasks:
            self._tasks[endpoint] = asyncio.create_task(self._follow(endpoint, address),
                                                        name=f"kv-events {address}")

    def unfollow(self, endpoint: str) -> None:
        task = self._tasks.pop(endpoint, None)
        if task is not None:
            task.cancel()
        self.translator.reset(endpoint)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, endpoint: str, address: str) -> None:
        socket = self._ctx.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(address)
        last: int | None = None
        try:
            while True:
                frames = await socket.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                if last is not None and seq <= last:
                    self.translator.reset(endpoint)  # the publisher started again
                elif last is not None and seq > last + 1:
                    self.gaps += seq - last - 1
                last = seq
                try:
                    batch = decode_batch(frames[2])
                except ValueError as exc:
                    log.warning("kv events from %s: %s", address, exc)
                    continue
                self.translator.apply(endpoint, batch.events)
                if self.on_event is not None:
                    self.on_event(endpoint)
        finally:
            socket.close(linger=0)
