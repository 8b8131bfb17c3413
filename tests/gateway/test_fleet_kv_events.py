"""KV events on the gateway's side: a replica's hashes translated to the picker's block keys,
and a live subscriber following a real publisher on the engine's block manager."""

from __future__ import annotations

import asyncio

from engine.block_manager import KVCacheManager
from engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventPublisher
from gateway.fleet.block_keys import block_keys, salt_extra
from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.kv_subscriber import EventTranslator, KVEventSubscriber
from tests.engine.test_block_manager import admit, make_seq
from tests.support.processes import free_port

A = "http://a/v1"
TOKENS = [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


def test_foreign_hashes_become_block_keys_from_their_tokens() -> None:
    """A replica hashing its own way (vLLM: 64-bit digests) still lands on the gateway's keys."""
    locator = BlockLocator()
    translator = EventTranslator(locator, block_size=4)
    translator.apply(A, [BlockStored([101, 102], None, TOKENS[:8], 4)])
    translator.apply(A, [BlockStored([103], 102, TOKENS[8:], 4)])  # a child of 102
    assert locator.matches(block_keys(TOKENS, 4)) == {A: 3}
    translator.apply(A, [BlockRemoved([102])])
    assert locator.matches(block_keys(TOKENS, 4)) == {A: 1}
    translator.apply(A, [AllBlocksCleared()])
    assert locator.held(A) == 0


def test_a_salted_first_block_keys_like_a_salted_prompt() -> None:
    locator = BlockLocator()
    translator = EventTranslator(locator, block_size=4)
    translator.apply(A, [BlockStored([7, 8], None, TOKENS[:8], 4, [("team-a",), None])])
    assert locator.matches(block_keys(TOKENS[:8], 4, salt_extra("team-a"))) == {A: 2}
    assert locator.matches(block_keys(TOKENS[:8], 4)) == {}  # unsalted prompt: not there


def test_blocks_whose_parent_was_never_seen_are_skipped() -> None:
    locator = BlockLocator()
    translator = EventTranslator(locator, block_size=4)
    translator.apply(A, [BlockStored([9], 555, TOKENS[:4], 4),  # joined after 555 was stored
                         BlockStored([10], None, TOKENS[:4], 16)])  # another block size
    assert (translator.unplaced, locator.held(A)) == (2, 0)


async def test_subscriber_follows_a_live_publisher() -> None:
    port = free_port()
    publisher = KVEventPublisher(f"tcp://127.0.0.1:{port}", block_size=4)
    locator = BlockLocator()
    seen: list[str] = []
    subscriber = KVEventSubscriber(EventTranslator(locator, 4), on_event=seen.append)
    subscriber.follow(A, f"tcp://127.0.0.1:{port}")
    kv = KVCacheManager(num_blocks=16, block_size=4)
    kv.events = publisher
    try:
        for _ in range(200):  # the SUB socket joins a moment after it connects
            publisher.all_cleared()
            await asyncio.sleep(0.02)
            if seen:
                break
        assert seen, "no event reached the subscriber"
        seq = make_seq(TOKENS + [4], "r")
        admit(kv, seq)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if locator.held(A) == 3:
                break
        assert locator.matches(block_keys(TOKENS, 4)) == {A: 3}
        assert seq.block_hashes == block_keys(TOKENS, 4)  # unsalted: the engine's own hashes
    finally:
        await subscriber.aclose()
        publisher.close()
