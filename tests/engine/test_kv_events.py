"""KV events: vLLM's wire format both ways, and the block manager's stores and evictions
published on a real ZeroMQ socket with exact hashes, parents and token ids."""

from __future__ import annotations

import msgpack
import zmq

from engine.block_manager import KVCacheManager, hash_block
from engine.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEventPublisher,
    decode_batch,
    encode_batch,
    wire_hash,
)
from tests.engine.test_block_manager import admit, make_seq
from tests.support.processes import free_port

H1 = hash_block(None, [1, 2, 3, 4])
H2 = hash_block(H1, [5, 6, 7, 8])


def test_batch_round_trips_in_vllms_map_layout() -> None:
    batch = EventBatch(12.5, [BlockStored([1, 2], None, list(range(8)), 4, [("salt-a",), None]),
                              BlockRemoved([3]), AllBlocksCleared()])
    raw = msgpack.unpackb(encode_batch(batch))
    assert raw[0] == 12.5 and raw[2] == 0
    assert raw[1][0] == {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
                         "token_ids": list(range(8)), "block_size": 4, "lora_id": None,
                         "medium": "GPU", "lora_name": None, "extra_keys": [["salt-a"], None]}
    assert raw[1][1] == {"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU"}
    assert raw[1][2] == {"type": "AllBlocksCleared"}
    back = decode_batch(encode_batch(batch))
    assert back.ts == 12.5
    assert back.events[0] == BlockStored([1, 2], None, list(range(8)), 4, [["salt-a"], None])
    assert back.events[1:] == [BlockRemoved([3]), AllBlocksCleared()]


def test_decode_reads_older_vllms_array_layout() -> None:
    payload = msgpack.packb([1.0, [["BlockStored", [7], 6, [9, 9, 9, 9], 4, None, "GPU"],
                                   ["BlockRemoved", [7], "GPU"], ["AllBlocksCleared"],
                                   ["SomethingNew", 1]]])
    batch = decode_batch(payload)
    assert batch.events == [BlockStored([7], 6, [9, 9, 9, 9], 4, None), BlockRemoved([7]),
                            AllBlocksCleared()]


def test_decode_refuses_what_is_not_a_batch() -> None:
    for payload in (b"\xc1", msgpack.packb({"ts": 1}), msgpack.packb([1.0])):
        try:
            decode_batch(payload)
        except ValueError as e:
            assert "not a KV event batch" in str(e)
        else:
            raise AssertionError(f"{payload!r} decoded")


def test_stored_blocks_list_their_tokens_and_extra_keys() -> None:
    event = BlockStored([1, 2], None, [1, 2, 3, 4, 5, 6, 7, 8], 4, [("s",), None])
    assert event.blocks() == [(1, [1, 2, 3, 4], ("s",)), (2, [5, 6, 7, 8], None)]


class _Sub:
    def __init__(self, address: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.setsockopt(zmq.RCVTIMEO, 5000)
        self.socket.connect(address)

    def next(self) -> tuple[int, EventBatch]:
        topic, seq, payload = self.socket.recv_multipart()
        assert topic == b""
        return int.from_bytes(seq, "big"), decode_batch(payload)

    def close(self) -> None:
        self.socket.close(linger=0)


def _publisher_and_subscriber(port: int) -> tuple[KVEventPublisher, _Sub]:
    publisher = KVEventPublisher(f"tcp://127.0.0.1:{port}", block_size=4)
    sub = _Sub(f"tcp://127.0.0.1:{port}")
    # a SUB socket joins a moment after connecting: publish until one message gets through
    for _ in range(100):
        publisher.all_cleared()
        try:
            sub.socket.setsockopt(zmq.RCVTIMEO, 50)
            sub.next()
            break
        except zmq.Again:
            continue
    sub.socket.setsockopt(zmq.RCVTIMEO, 5000)
    while True:  # drain the handshake's leftovers
        try:
            sub.socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            break
    return publisher, sub


def test_publisher_sends_stored_runs_and_evictions_from_the_block_manager() -> None:
    publisher, sub = _publisher_and_subscriber(free_port())
    try:
        kv = KVCacheManager(num_blocks=3, block_size=4)
        kv.events = publisher
        a = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9], "a")
        admit(kv, a)  # two full blocks stored, one partial
        seq, batch = sub.next()
        assert batch.events == [BlockStored([wire_hash(H1), wire_hash(H2)], None,
                                            [1, 2, 3, 4, 5, 6, 7, 8], 4, None)]
        kv.free(a)
        b = make_seq([20, 21, 22, 23, 24, 25, 26, 27, 28], "b")  # needs all three blocks
        admit(kv, b)
        seen: list = []
        while not seen or not isinstance(seen[-1], BlockStored):
            seq2, batch = sub.next()
            assert seq2 > seq
            seen += batch.events
        # the tail is evicted first (the LRU order `free` left), then the prefix
        removed = [h for e in seen[:-1] for h in e.block_hashes]
        assert removed == [wire_hash(H2), wire_hash(H1)]
        b1 = hash_block(None, [20, 21, 22, 23])
        b2 = hash_block(b1, [24, 25, 26, 27])
        assert seen[-1] == BlockStored([wire_hash(b1), wire_hash(b2)], None,
                                       [20, 21, 22, 23, 24, 25, 26, 27], 4, None)
    finally:
        sub.close()
        publisher.close()


def test_a_salted_first_block_carries_its_salt_and_children_chain_to_their_parent() -> None:
    publisher, sub = _publisher_and_subscriber(free_port())
    try:
        kv = KVCacheManager(num_blocks=8, block_size=4)
        kv.events = publisher
        a = make_seq([1, 2, 3, 4, 5], "a")
        a.cache_salt = "tenant-a"  # the engine's request field, where it sets one
        admit(kv, a)
        _, batch = sub.next()
        (stored,) = batch.events
        assert stored.extra_keys == [["tenant-a"]]
        a.token_ids += [6, 7, 8]  # the answer fills the second block
        a.num_computed_tokens = 8
        kv.cache_full_blocks(a)
        _, batch = sub.next()
        assert batch.events == [BlockStored([wire_hash(a.block_hashes[1])],
                                            wire_hash(a.block_hashes[0]), [5, 6, 7, 8], 4, None)]
    finally:
        sub.close()
        publisher.close()
