"""Adaptive skipping: a route whose semantic lookups never hit stops paying for them, probes
now and then, and looks up every request again after a probe hits."""

from cache.skip import SkipGate


def test_a_route_without_hits_skips_all_but_probes_and_a_hit_turns_lookups_back_on():
    gate = SkipGate(window=10, min_rate=0.1, probe_every=4)
    for _ in range(10):
        assert gate.should_look("chat")
        gate.record("chat", hit=False)
    assert gate.skipping("chat")
    looked = [gate.should_look("chat") for _ in range(8)]
    assert looked == [False, False, False, True, False, False, False, True]
    gate.record("chat", hit=True)  # the probe hit
    assert not gate.skipping("chat") and gate.should_look("chat")


def test_a_route_with_hits_keeps_looking_and_routes_are_apart():
    gate = SkipGate(window=10, min_rate=0.1, probe_every=4)
    for i in range(30):
        gate.record("faq", hit=i % 5 == 0)
        gate.record("chat", hit=False)
    assert not gate.skipping("faq") and gate.skipping("chat")
