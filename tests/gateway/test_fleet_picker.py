"""The endpoint picker and its block map on their own: exact endpoints for tiny fleets."""

from __future__ import annotations

import random

import pytest

from gateway.fleet.block_keys import block_keys, root_key, salt_extra
from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.load import EndpointLoad, LoadTracker
from gateway.fleet.picker import EndpointPicker, Pick, PickerSettings, rendezvous

A, B, C = "http://a/v1", "http://b/v1", "http://c/v1"
FLEET = [A, B, C]


def keys(*blocks: int) -> list[int]:
    """Block keys of a prompt made of the given 4-token blocks (block n = [n, n, n, n])."""
    return block_keys([t for b in blocks for t in (b, b, b, b)], 4)


def picker(policy: str = "prefix", **settings) -> EndpointPicker:
    return EndpointPicker(policy, PickerSettings(block_size=4, **settings), BlockLocator())


# ---------------------------------------------------------------- block keys and the locator


def test_block_keys_chain_and_a_salt_changes_every_key() -> None:
    plain = block_keys([1, 1, 1, 1, 2, 2, 2, 2, 3], 4)
    assert len(plain) == 2  # the partial third block has no key
    assert block_keys([1, 1, 1, 1], 4) == plain[:1]
    assert block_keys([2, 2, 2, 2], 4, parent=plain[0]) == plain[1:]
    salted = block_keys([1, 1, 1, 1, 2, 2, 2, 2], 4, salt_extra("team-a"))
    assert set(salted).isdisjoint(plain)
    assert root_key(None) is None and root_key(("team-a",)) == root_key(["team-a"])


def test_locator_matches_the_longest_held_prefix_per_endpoint() -> None:
    locator = BlockLocator()
    prompt = keys(1, 2, 3, 4)
    locator.add(A, prompt[:3])
    locator.add(B, prompt[:1])
    locator.add(C, keys(9))
    assert locator.matches(prompt) == {A: 3, B: 1}
    locator.add(B, prompt)
    assert locator.matches(prompt) == {A: 3, B: 4}
    assert locator.matches(keys(5)) == {}


def test_locator_forgets_least_recently_used_blocks_past_capacity() -> None:
    locator = BlockLocator(capacity_blocks=3)
    locator.add(A, keys(1, 2))
    locator.add(A, keys(7))
    locator.add(A, keys(1))  # touched: now the most recent
    locator.add(A, keys(8))  # over capacity: the oldest, block 2 of the first prompt, goes
    assert locator.held(A) == 3
    assert locator.matches(keys(1, 2)) == {A: 1}
    locator.set_capacity(A, 1)
    assert locator.held(A) == 1 and locator.holds(A, keys(8)[0])


def test_locator_remove_and_clear_drop_only_that_endpoint() -> None:
    locator = BlockLocator()
    locator.add(A, keys(1, 2))
    locator.add(B, keys(1, 2))
    locator.remove(A, keys(1, 2)[1:])
    assert locator.matches(keys(1, 2)) == {A: 1, B: 2}
    locator.clear(B)
    assert locator.matches(keys(1, 2)) == {A: 1}
    assert locator.held(B) == 0


# ---------------------------------------------------------------- policies


def test_prefix_goes_where_the_prefix_is() -> None:
    p = picker()
    p.locator.add(B, keys(1, 2, 3))
    pick = p.pick(FLEET, {}, keys=keys(1, 2, 3, 4), prompt_tokens=18)
    assert (pick.endpoint, pick.reason, pick.matched_blocks, pick.new_tokens) == (B, "prefix", 3, 6)


def test_prefix_spills_when_the_holder_is_busy_and_then_both_hold_it() -> None:
    p = picker()
    p.locator.add(A, keys(1, 2))
    busy = {A: EndpointLoad(in_flight=3, prefilling=3, pending_tokens=400)}
    pick = p.pick(FLEET, busy, keys=keys(1, 2), prompt_tokens=8)
    assert pick.endpoint != A and pick.new_tokens == 8
    p.record(pick, keys(1, 2))
    assert p.locator.matches(keys(1, 2)) == {A: 2, pick.endpoint: 2}


def test_imbalance_override_keeps_a_hot_prefix_off_an_overloaded_replica() -> None:
    p = picker()
    p.locator.add(A, keys(*range(1, 40)))
    # A decodes 6 requests (cost 6 x 16 tokens, still below computing the prompt anywhere
    # else), but 6 is past 1.5 x the mean of 7/3 requests + 2
    loads = {A: EndpointLoad(in_flight=6),
             B: EndpointLoad(in_flight=1, prefilling=1, pending_tokens=100)}
    pick = p.pick(FLEET, loads, keys=keys(*range(1, 40)), prompt_tokens=156)
    assert (pick.endpoint, pick.reason) == (C, "override")  # C is idle, B has one


def test_a_replica_that_took_too_many_recent_picks_is_passed_over() -> None:
    # in flight counts say nothing in a lightly loaded fleet; the share of recent picks does
    p = picker(share_window=2)  # 2 picks per candidate: the last 6 are remembered
    prompt = keys(*range(1, 40))
    p.locator.add(A, prompt)
    for _ in range(5):
        p.record(p.pick(FLEET, {}, keys=prompt, prompt_tokens=156), prompt)
    assert p.locator.matches(prompt) == {A: 39}  # the window is not full yet: all went to A
    p.record(p.pick(FLEET, {}, keys=prompt, prompt_tokens=156), prompt)  # A: 6 of 6
    assert p.pick(FLEET, {}, keys=prompt, prompt_tokens=156).endpoint == A  # idle: kept
    decoding = {A: EndpointLoad(in_flight=1)}  # one request, far under the in-flight bar
    spill = p.pick(FLEET, decoding, keys=prompt, prompt_tokens=156)  # 6 >= 1.75 x 2 + 1
    assert (spill.endpoint, spill.reason) == (rendezvous(str(prompt[7]), [B, C]), "override")
    for endpoint in (B, C, B, C):
        p.record(Pick(endpoint, "prefix"), [])
    back = p.pick(FLEET, decoding, keys=prompt, prompt_tokens=156)  # A: 2 of the last 6
    assert (back.endpoint, back.reason) == (A, "prefix")


def test_ties_break_by_rendezvous_so_gateways_agree() -> None:
    first, second = picker(), picker()
    prompt = keys(5, 6, 7)
    a = first.pick(FLEET, {}, keys=prompt, prompt_tokens=12)
    b = second.pick(FLEET, {}, keys=prompt, prompt_tokens=12)
    assert a.endpoint == b.endpoint == rendezvous(str(prompt[-1]), FLEET)
    s1 = first.pick(FLEET, {}, keys=prompt, prompt_tokens=12, session_id="s-1")
    assert s1.endpoint == rendezvous("s-1", FLEET)


def test_when_every_tied_replica_holds_the_prompt_the_cheapest_takes_it() -> None:
    p = picker()
    prompt = keys(1, 2, 3)
    favourite = rendezvous(str(prompt[-1]), FLEET)
    for endpoint in FLEET:
        p.locator.add(endpoint, prompt)
    assert p.pick(FLEET, {}, keys=prompt, prompt_tokens=12).endpoint == favourite
    # one request decoding there (16 tokens, within the tie): the others hold it as well
    busy = {favourite: EndpointLoad(in_flight=1)}
    others = [e for e in FLEET if e != favourite]
    pick = p.pick(FLEET, busy, keys=prompt, prompt_tokens=12)
    assert (pick.endpoint, pick.reason) == (rendezvous(str(prompt[-1]), others), "prefix")
    # where only the favourite holds it, near ties still keep the prompt together there
    p.forget(others[0])
    p.forget(others[1])
    p.locator.add(others[0], prompt[:2])
    assert p.pick(FLEET, busy, keys=prompt, prompt_tokens=16).endpoint == favourite


def test_prefix_keeps_a_session_where_it_went_last() -> None:
    p = picker()
    first = p.pick(FLEET, {}, keys=keys(1), prompt_tokens=4, session_id="s")
    p.record(first, [], "s")  # nothing hashed (say, no tokenizer): only the session is known
    p.locator.add(rendezvous("other", FLEET), keys(1))
    again = p.pick(FLEET, {}, keys=[], prompt_tokens=4, session_id="s")
    assert again.endpoint == first.endpoint and again.reason == "session"


def test_session_policy_is_sticky_unless_overloaded() -> None:
    p = picker("session")
    home = rendezvous("conv-1", FLEET)
    assert p.pick(FLEET, {}, session_id="conv-1").endpoint == home
    loads = {home: EndpointLoad(in_flight=9)}
    pick = p.pick(FLEET, loads, session_id="conv-1")
    assert pick.endpoint != home and pick.reason == "override"
    assert p.pick(FLEET, loads).reason == "least_loaded"  # no session: fewest requests


def test_least_loaded_round_robin_and_random() -> None:
    loads = {A: EndpointLoad(in_flight=2), B: EndpointLoad(others_waiting=1), C: EndpointLoad()}
    assert picker("least_loaded").pick(FLEET, loads).endpoint == C
    rr = picker("round_robin")
    assert [rr.pick(FLEET, loads).endpoint for _ in range(4)] == [B, C, A, B]
    rnd = EndpointPicker("random", rng=random.Random(3))
    assert {rnd.pick(FLEET, {}).endpoint for _ in range(30)} == set(FLEET)


def test_unknown_policy_and_empty_fleet_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown balance policy 'fastest'"):
        EndpointPicker("fastest")
    with pytest.raises(ValueError, match="no endpoint"):
        picker().pick([], {})


# ---------------------------------------------------------------- load


def test_tracker_counts_own_requests_and_the_rest_from_scrapes() -> None:
    tracker = LoadTracker()
    t1 = tracker.sent(A, 100)
    t2 = tracker.sent(A, 50)
    assert tracker.load(A) == EndpointLoad(in_flight=2, prefilling=2, pending_tokens=150)
    tracker.first_token(t1)
    tracker.observe(A, running=4, waiting=3, kv_usage=0.5)  # 1 own decoding, 1 own queued
    load = tracker.load(A)
    assert (load.others_running, load.others_waiting, load.requests, load.decoding) == (3, 2, 7, 4)
    tracker.finished(t2)
    tracker.finished(t2)  # idempotent
    tracker.finished(t1)
    assert (load.in_flight, load.prefilling, load.pending_tokens) == (0, 0, 0)
    tracker.forget(A)
    assert load.requests == 0 and load.kv_usage == 0.0
