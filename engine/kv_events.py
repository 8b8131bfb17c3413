"""KV events: the blocks an engine stores and evicts, published in vLLM's format.

`headstart engine --kv-events tcp://*:5557` publishes, on a ZeroMQ PUB socket, what its
prefix cache gains and loses, so gateways in front of several replicas know which replica
holds which prefix (gateway/fleet/kv_subscriber.py) without asking. The wire format is
vLLM's (`vllm/distributed/kv_events.py`), so one subscriber follows vLLM replicas too:

- a message is three frames: topic (empty), sequence number (8 bytes, big-endian), payload;
- the payload is msgpack `[ts, [event, ...], data_parallel_rank]`;
- an event is a map tagged by `type`: `BlockStored` (`block_hashes`, `parent_block_hash`,
  `token_ids`, `block_size`, `lora_id`, `medium`, `lora_name`, and `extra_keys` when a
  block's hash covers more than its tokens: the cache salt on a prompt's first block),
  `BlockRemoved` (`block_hashes`, `medium`) or `AllBlocksCleared`. Older vLLM releases send
  each event as an array, the tag first; `decode_batch` reads both.

`medium` says where the block sits, as vLLM names it: `GPU` for the engine's pool (whatever
the device), `CPU` or `DISK` for its second tier (`--kv-offload-mb`, `--kv-offload-dir`).
A block evicted into the tier is a `BlockStored` on the tier's medium (no token ids, no
parent: the block was announced on `GPU` first, as vLLM's offloading connector sends it)
followed by the pool's `BlockRemoved`; one loaded back is a `GPU` `BlockStored` again.

Block hashes go out as the low 64 bits of the engine's 128-bit hashes (vLLM does the same).
The block manager calls `block_stored` / `block_removed` on its step thread; they only queue
a tuple. A thread of the publisher's own batches whatever queued since its last send into
one message, so the step never waits on the socket.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq

from engine.sequence import Sequence

log = logging.getLogger("headstart.engine")

HASH_MASK = (1 << 64) - 1
MEDIUM = "GPU"  # vLLM names its device tier so; the engine's pool, whatever the device
FLUSH_INTERVAL_S = 0.005  # the longest an event waits for others to share its message


@dataclass
class BlockStored:
    """Consecutive full blocks of one prompt, `parent_block_hash` the block before them."""

    block_hashes: list[Any]
    parent_block_hash: Any
    token_ids: list[int]
    block_size: int
    extra_keys: list[Any] | None = None  # per block; (salt,) on a salted first block
    medium: str = MEDIUM  # GPU (the pool), CPU or DISK (a second tier)

    def blocks(self) -> list[tuple[Any, list[int], Any]]:
        """(hash, its tokens, its extra keys) of each block, in order."""
        bs = self.block_size
        extras = self.extra_keys or [None] * len(self.block_hashes)
        return [(h, self.token_ids[i * bs:(i + 1) * bs], extras[i] if i < len(extras) else None)
                for i, h in enumerate(self.block_hashes)]


@dataclass
class BlockRemoved:
    block_hashes: list[Any]
    medium: str = MEDIUM


@dataclass
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass
class EventBatch:
    ts: float
    events: list[KVEvent] = field(default_factory=list)


def wire_hash(block_hash: int) -> int:
    """A 128-bit block hash as it goes out: its low 64 bits."""
    return block_hash & HASH_MASK


def encode_event(event: KVEvent) -> dict[str, Any]:
    if isinstance(event, BlockStored):
        out = {"type": "BlockStored", "block_hashes": event.block_hashes,
               "parent_block_hash": event.parent_block_hash, "token_ids": event.token_ids,
               "block_size": event.block_size, "lora_id": None, "medium": event.medium,
               "lora_name": None}
        if event.extra_keys is not None:
            out["extra_keys"] = event.extra_keys
        return out
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "block_hashes": event.block_hashes,
                "medium": event.medium}
    return {"type": "AllBlocksCleared"}


def encode_batch(batch: EventBatch, data_parallel_rank: int = 0) -> bytes:
    return msgpack.packb([batch.ts, [encode_event(e) for e in batch.events],
                          data_parallel_rank])


def _decode_event(raw: Any) -> KVEvent | None:
    """One event, map-tagged (vLLM today) or array-tagged (older vLLM); None if unknown."""
    if isinstance(raw, dict):
        kind, get = raw.get("type"), raw.get
    elif isinstance(raw, list | tuple) and raw:
        kind = raw[0]
        names = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size",
                                 "lora_id", "medium", "lora_name", "extra_keys"),
                 "BlockRemoved": ("block_hashes", "medium")}.get(kind, ())
        fields = dict(zip(names, raw[1:], strict=False))
        get = fields.get
    else:
        return None
    if kind == "BlockStored":
        return BlockStored(list(get("block_hashes") or []), get("parent_block_hash"),
                           list(get("token_ids") or []), int(get("block_size") or 0),
                           get("extra_keys"), get("medium") or MEDIUM)
    if kind == "BlockRemoved":
        return BlockRemoved(list(get("block_hashes") or []), get("medium") or MEDIUM)
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_batch(payload: bytes) -> EventBatch:
    """A payload as vLLM or `headstart engine` publishes it; ValueError when it is not one."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise ValueError(f"not a KV event batch: {exc}") from None
    if not isinstance(raw, list | tuple) or len(raw) < 2 or not isinstance(raw[1], list):
        raise ValueError("not a KV event batch: expected [ts, events, ...]")
    events = [e for e in (_decode_event(r) for r in raw[1]) if e is not None]
    return EventBatch(float(raw[0]), events)


class KVEventPublisher:
    """Publishes the block manager's stores and evictions on a ZeroMQ PUB socket bound to
    `endpoint` (e.g. `tcp://*:5557`). Attach with `kv.events = publisher`."""

    def __init__(self, endpoint: str, block_size: int, *, hwm: int = 100_000) -> None:
        self.endpoint = endpoint
        self.block_size = block_size
        self._queue: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._socket = zmq.Context.instance().socket(zmq.PUB)
        self._socket.set_hwm(hwm)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(endpoint)
        self.seq = 0
        self._closed = False
        self._queue.put(("cleared",))  # a subscriber that stays connected forgets the old state
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- BlockEvents (step thread)

    def block_stored(self, seq: Sequence, index: int) -> None:
        bs = self.block_size
        parent = seq.block_hashes[index - 1] if index else None
        salt = getattr(seq, "cache_salt", None) if index == 0 else None
        self._queue.put(("stored", seq.block_hashes[index], parent,
                         seq.token_ids[index * bs:(index + 1) * bs], salt))

    def block_offloaded(self, block_hash: int, medium: str) -> None:
        self._queue.put(("offloaded", block_hash, medium))

    def block_removed(self, block_hash: int, medium: str = MEDIUM) -> None:
        self._queue.put(("removed", block_hash, medium))

    def all_cleared(self) -> None:
        self._queue.put(("cleared",))

    # ---------------------------------------------------------------- publisher thread

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            items = [item]
            deadline = time.monotonic() + FLUSH_INTERVAL_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    more = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if more is None:
                    self._send(items)
                    return
                items.append(more)
            self._send(items)

    def _send(self, items: list[tuple]) -> None:
        batch = EventBatch(time.time(), self.events_of(items))
        try:
            self._socket.send_multipart([b"", self.seq.to_bytes(8, "big"),
                                         encode_batch(batch)])
            self.seq += 1
        except zmq.ZMQError as exc:  # a full or closed socket must never stop the engine
            log.warning("kv events: dropped %d events (%s)", len(batch.events), exc)

    def events_of(self, items: list[tuple]) -> list[KVEvent]:
        """Queued items as events: a run of stored blocks, each the child of the one
        before, becomes one `BlockStored`; a run of offloads or of removals on one medium
        one `BlockStored` or `BlockRemoved`."""
        events: list[KVEvent] = []
        last_hash = None
        for item in items:
            kind = item[0]
            prev = events[-1] if events else None
            if kind == "stored":
                _, block_hash, parent, tokens, salt = item
                extra = [(salt,)] if salt is not None else None
                if (isinstance(prev, BlockStored) and parent is not None
                        and parent == last_hash and salt is None):
                    prev.block_hashes.append(wire_hash(block_hash))
                    prev.token_ids.extend(tokens)
                    if prev.extra_keys is not None:
                        prev.extra_keys.append(None)
                else:
                    events.append(BlockStored(
                        [wire_hash(block_hash)], None if parent is None else wire_hash(parent),
                        list(tokens), self.block_size, extra))
                last_hash = block_hash
            elif kind == "offloaded":
                _, block_hash, medium = item
                if (isinstance(prev, BlockStored) and prev.medium == medium
                        and not prev.token_ids):
                    prev.block_hashes.append(wire_hash(block_hash))
                else:
                    events.append(BlockStored([wire_hash(block_hash)], None, [],
                                              self.block_size, None, medium))
                last_hash = None
            elif kind == "removed":
                _, block_hash, medium = item
                if isinstance(prev, BlockRemoved) and prev.medium == medium:
                    prev.block_hashes.append(wire_hash(block_hash))
                else:
                    events.append(BlockRemoved([wire_hash(block_hash)], medium))
                last_hash = None
            else:
                events.append(AllBlocksCleared())
                last_hash = None
        return events

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=2.0)
        self._socket.close(linger=0)
