"""A replica's second KV tier as the fleet sees it: KV events on the tier's medium (vLLM's
`CPU`/`DISK`), the locator's media per block, and the picker charging a tier hit its reload
cost (between a pool hit and no hit)."""

from __future__ import annotations

from engine.block_manager import KVCacheManager
from engine.kv_events import (
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEventPublisher,
    decode_batch,
    encode_batch,
)
from engine.kv_tier import SecondTier
from gateway.fleet.block_keys import block_keys
from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.kv_subscriber import EventTranslator
from gateway.fleet.load import EndpointLoad
from gateway.fleet.picker import EndpointPicker, PickerSettings
from tests.engine.test_kv_tier import FakeStore, run

A, B, C = "http://a/v1", "http://b/v1", "http://c/v1"
TOKENS = [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


def test_a_block_moved_to_the_tier_stays_held_until_every_medium_drops_it():
    locator = BlockLocator()
    translator = EventTranslator(locator, block_size=4)
    keys = block_keys(TOKENS, 4)
    translator.apply(A, [BlockStored([101, 102, 103], None, TOKENS, 4)])
    # the engine's order on eviction: the tier takes it, then the pool lets it go
    translator.apply(A, [BlockStored([102, 103], None, [], 4, medium="CPU"),
                         BlockRemoved([102, 103])])
    assert locator.matches(keys) == {A: 3}
    assert locator.in_tier_only(A, keys) == 2
    translator.apply(A, [BlockStored([103], 102, TOKENS[8:], 4)])  # loaded back
    assert locator.in_tier_only(A, keys) == 1
    translator.apply(A, [BlockRemoved([102], medium="CPU")])  # the tier dropped it too
    assert locator.matches(keys) == {A: 1}
    assert translator.unplaced == 0


def test_a_tier_store_of_a_block_never_seen_is_not_placed():
    locator = BlockLocator()
    translator = EventTranslator(locator, block_size=4)
    translator.apply(A, [BlockStored([555], None, [], 4, medium="DISK")])
    assert (translator.unplaced, locator.held(A)) == (1, 0)


def test_the_picker_charges_a_tier_hit_its_reload_cost():
    locator = BlockLocator()
    keys = block_keys(list(range(64)), 16)  # 4 blocks
    locator.add(A, keys)  # in A's pool
    locator.add(B, keys, "CPU")  # in B's second tier
    settings = PickerSettings(tier_reload_cost=0.25, tie_tokens=0)
    picker = EndpointPicker("prefix", settings, locator)
    idle = {e: EndpointLoad() for e in (A, B, C)}
    assert picker.pick([A, B, C], idle, keys=keys, prompt_tokens=80).endpoint == A
    # B: 16 new + 0.25 x 64 to reload = 32; C: 80 new; A busier by 20 tokens: B is cheapest
    busy = {**idle, A: EndpointLoad(pending_tokens=20)}
    pick = picker.pick([A, B, C], busy, keys=keys, prompt_tokens=80)
    assert (pick.endpoint, pick.matched_blocks, pick.new_tokens) == (B, 4, 16)
    assert picker.pick([B, C], idle, keys=keys, prompt_tokens=80).endpoint == B


def test_the_engine_publishes_the_tier_medium_in_vllms_shape():
    kv = KVCacheManager(4, 4, tier=SecondTier(8, FakeStore()))
    publisher = KVEventPublisher.__new__(KVEventPublisher)  # its queue only, no socket
    publisher.block_size = 4
    queued: list[tuple] = []
    publisher._queue = type("Q", (), {"put": staticmethod(queued.append)})()
    kv.events = publisher
    store = kv.tier.store
    a = run(kv, store, list(range(13)), "a")
    run(kv, store, list(range(100, 113)), "b")  # a's three blocks go to the tier
    events = publisher.events_of(queued)
    moved = [e for e in events if isinstance(e, BlockStored) and e.medium == "CPU"]
    assert [e.token_ids for e in moved] == [[], [], []]
    assert [e.block_hashes[0] for e in moved] == [h & (2 ** 64 - 1)
                                                  for h in reversed(a.block_hashes[:3])]
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert {e.medium for e in removed} == {"GPU"}
    wire = decode_batch(encode_batch(EventBatch(1.0, events)))
    assert [getattr(e, "medium", None) for e in wire.events] == \
        [getattr(e, "medium", None) for e in events]


def test_a_replicas_tier_capacity_is_read_from_its_metrics():
    from gateway.fleet.health import ReplicaLoad, parse_metrics

    text = ("headstart_engine_kv_blocks_used 30\nheadstart_engine_kv_blocks_total 120\n"
            "headstart_engine_kv_tier_capacity_blocks 480.0\n")
    assert parse_metrics(text) == ReplicaLoad(0, 0, 0.25, 120, 480)
