"""The fleet simulator: its replica model with tiny numbers, its traces, and whole runs that
use the gateway's real picker (small fleets, short runs; no timing)."""

from __future__ import annotations

import pytest

from bench.fleet.sim.calibrate import _fit_prefill
from bench.fleet.sim.calibration import calibrate, live_seed
from bench.fleet.sim.replica import SimReplica, SimRequest, StepCosts
from bench.fleet.sim.report import disagg_markdown, disagg_verdicts
from bench.fleet.sim.simulator import FleetSim, SimConfig, simulate
from bench.fleet.sim.workloads import TraceSizes, build
from bench.harness.workloads import WorkloadSizes, build_sessions
from engine import load_tokenizer
from engine.serving.inputs import chat_prompt
from gateway.fleet.block_keys import block_keys
from gateway.fleet.picker import EndpointPicker
from openai_api import ChatCompletionRequest

COSTS = StepCosts(step_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, attend_pair_s=0.0,
                  prefill_step_s=0.0)


def request(tokens: list[int], answer: int = 2) -> SimRequest:
    return SimRequest(block_keys(tokens, 4), block_keys(tokens + [7] * answer, 4), len(tokens),
                      answer, 0.0)


def test_replica_decodes_first_then_prefills_within_the_budget() -> None:
    r = SimReplica("r", COSTS, capacity_blocks=64, block_size=4, budget=16)
    long, short = request(list(range(30))), request(list(range(100, 106)))
    r.submit(long)
    chosen, duration = r.plan()
    assert chosen == {long: 16} and duration == 0.01 + 16 * 0.001
    r.finish_step(chosen, 1.0, duration)
    r.submit(short)
    chosen, _ = r.plan()  # someone waits: the long prefill is capped at half the step, the
    assert chosen == {long: 10, short: 6}  # newcomer admitted, the rest topped up
    result = r.finish_step(chosen, 2.0, 0.0)
    assert result.first_tokens == [short] and short.first_token_at == 2.0
    chosen, duration = r.plan()
    assert chosen == {short: 1, long: 4} and duration == 0.01 + 4 * 0.001 + 0.002


def test_a_step_costs_its_attended_pairs_too() -> None:
    r = SimReplica("r", StepCosts(0.01, 0.001, 0.002, attend_pair_s=1e-4, prefill_step_s=0.0),
                   capacity_blocks=64, block_size=4)
    r.submit(request(list(range(30))))
    _, duration = r.plan()  # all 30 tokens, each attending the ones before it: 30 x 15 pairs
    assert duration == 0.01 + 30 * 0.001 + 30 * 15 * 1e-4


def test_a_step_that_prefills_pays_the_prefill_steps_fixed_cost_once() -> None:
    costs = StepCosts(0.01, 0.001, 0.002, attend_pair_s=0.0, prefill_step_s=0.03)
    assert costs.step(0, 3) == 0.01 + 3 * 0.002  # decodes alone: no prefill cost
    assert costs.step(16, 3) == 0.01 + 0.03 + 16 * 0.001 + 3 * 0.002


def test_calibration_fit_separates_a_prefill_steps_fixed_cost() -> None:
    # steps timed as 8 ms + 30 ms + 0.6 ms a token + 0.5 us a pair are fitted back exactly
    points = [(n, c, 0.008 + 0.03 + 0.0006 * n + 5e-7 * n * (c + n / 2))
              for c in (0, 1024) for n in (32, 128, 256, 512)]
    extra, per_token, per_pair = _fit_prefill(points, 0.008)
    assert (round(extra, 6), round(per_token, 7), round(per_pair, 9)) == (0.03, 0.0006, 5e-7)


def test_replica_reuses_cached_blocks_and_evicts_least_recently_used() -> None:
    r = SimReplica("r", COSTS, capacity_blocks=3, block_size=4)
    first = request(list(range(9)), answer=1)
    r.submit(first)
    chosen, _ = r.plan()
    result = r.finish_step(chosen, 1.0, 0.0)  # its first token is its whole answer
    assert result.first_tokens == result.finished == [first] and len(r.cache) == 2 and result.removed == []
    again = request(list(range(9)) + [50, 51, 52, 53])
    r.submit(again)
    chosen, _ = r.plan()
    assert again.cached_tokens == 8 and chosen == {again: 5}
    result = r.finish_step(chosen, 2.0, 0.0)
    assert len(result.stored) == 1 and result.removed == []
    other = request([90, 91, 92, 93, 94])
    r.submit(other)
    chosen, _ = r.plan()
    result = r.finish_step(chosen, 3.0, 0.0)
    assert result.removed == [first.keys[0]]  # the oldest block went first


def test_traces_are_seeded_and_turns_grow_the_prompt() -> None:
    a = build("chat", 5, seed=3, sizes=TraceSizes(groups=2, prefix_tokens=32, user_tokens=8))
    b = build("chat", 5, seed=3, sizes=TraceSizes(groups=2, prefix_tokens=32, user_tokens=8))
    assert [s.prompt(0) for s in a] == [s.prompt(0) for s in b]
    s = a[0]
    s.answers.append([1, 2, 3])
    assert s.prompt(1) == s.prefix + s.turns[0] + [1, 2, 3] + s.turns[1]
    hot = build("hot", 400, seed=1, sizes=TraceSizes(groups=10, hot_share=0.5))
    share = sum(x.group == "g0" for x in hot) / len(hot)
    assert 0.4 < share < 0.6


def test_the_live_chat_trace_is_what_the_engine_reads() -> None:
    """chat_live's token ids equal the chat template rendered and tokenized as the engine
    does it for the very sessions the live load generator sends."""
    tok = load_tokenizer(None)
    sim = build("chat_live", 2, seed=5, pool_seed=0)
    live = build_sessions("chat", 2, 5, WorkloadSizes(), pool_seed=0)
    for s, session in zip(sim, live, strict=True):
        messages = [{"role": "system", "content": session.system},
                    {"role": "user", "content": session.turns[0].user}]
        request = ChatCompletionRequest.model_validate({"model": "m", "messages": messages})
        assert s.prompt(0) == tok.encode(chat_prompt(request, tok))


def test_prefix_routing_beats_round_robin_on_hit_ratio_with_the_real_picker() -> None:
    base = SimConfig(replicas=4, workload="chat", rate=1.0, duration_s=60.0, warmup_s=10.0,
                     sizes=TraceSizes(groups=8), capacity_blocks=512)
    sim = FleetSim(base)
    assert all(isinstance(g.picker, EndpointPicker) for g in sim.gateways)
    prefix = sim.run()
    rr = simulate(SimConfig(**{**base.__dict__, "policy": "round_robin"}))
    assert prefix.requests == rr.requests > 50
    assert prefix.hit_ratio > rr.hit_ratio + 0.1
    assert simulate(base).row() == prefix.row()  # deterministic


def test_kv_events_reach_every_gateway() -> None:
    sim = FleetSim(SimConfig(replicas=3, gateways=2, policy="prefix+kv", workload="groups",
                             rate=6.0, duration_s=10.0, warmup_s=2.0,
                             sizes=TraceSizes(groups=3)))
    sim.run()
    one, two = (g.picker.locator for g in sim.gateways)
    for name, replica in sim.replicas.items():
        cached = list(replica.cache)[-5:]
        assert all(one.holds(name, k) and two.holds(name, k) for k in cached)


def test_calibration_replays_a_live_run() -> None:
    live = {"settings": {"sizes": {}, "seed": 0, "duration_s": 5.0, "warmup_s": 1.0,
                         "drain_s": 20.0, "engine_args": ["--num-kv-blocks", "256"]},
            "rates": [2.0, 1.0],
            "policies": [{"policy": "prefix", "replicas": 3, "runs": [
                {"rate": rate, "requests": 10, "ttft_ms": {"p50": 80.0, "p95": 200.0},
                 "prompt_tokens": 1000, "cached_tokens": 800} for rate in (2.0, 1.0)]}]}
    first, second = calibrate(live)
    assert first["policy"] == "prefix" and first["live_p95_ms"] == 200.0
    assert first["live_hit"] == 0.8 and first["rate"] == 2.0 and second["rate"] == 1.0
    assert first["sim_p95_ms"] > 0 and 0 < first["sim_hit"] < 1
    assert second["sim_hit"] > 0.5
    # each run starts on the replicas (and caches) the run before it left
    config = SimConfig(replicas=2, workload="groups", rate=2.0, duration_s=5.0)
    leader = FleetSim(config)
    leader.run()
    held = {name: list(r.cache) for name, r in leader.replicas.items()}
    follower = FleetSim(config, after=leader)
    assert all(held.values()) and {n: list(r.cache) for n, r in follower.replicas.items()} == held
    assert live_seed(0, 2.0) == 2000 and live_seed(1, 0.5) == 100_503


def test_a_decode_replica_computes_only_past_the_handed_blocks() -> None:
    r = SimReplica("d", COSTS, capacity_blocks=64, block_size=4)
    handed = request(list(range(30)))  # 7 full blocks, 2 tokens past them
    handed.handed = 7
    r.extra_s = 0.005  # loading the blocks, on the next step
    r.submit(handed)
    chosen, duration = r.plan()
    assert chosen == {handed: 2} and handed.cached_tokens == 28
    assert duration == 0.01 + 2 * 0.001 + 0.005
    r.finish_step(chosen, 1.0, duration)
    chosen, duration = r.plan()
    assert r.extra_s == 0.0 and duration == 0.01 + 0.002  # loaded once
    r.finish_step(chosen, 1.5, duration)
    assert handed.gaps == [0.5]  # first token at 1.0, the second at 1.5


def test_a_split_fleet_reads_on_prefill_replicas_and_decodes_on_the_others() -> None:
    base = SimConfig(replicas=4, policy="prefix+kv", workload="rag", rate=1.0, duration_s=20.0,
                     warmup_s=5.0, sizes=TraceSizes(groups=4, answer_tokens=16),
                     handover_block_s=0.001, import_block_s=0.0001)
    split = FleetSim(SimConfig(**{**base.__dict__, "prefill_replicas": 1}))
    result = split.run()
    assert result.unfinished == 0 and result.requests > 10
    assert result.itl_ms["p95"] > 0 and result.row()["prefill_replicas"] == 1
    prefill = split.replicas["r000"]
    assert prefill.served == len(split.records)  # every request was read there, once
    decoded = sum(r.served for name, r in split.replicas.items() if name != "r000")
    assert decoded == len(split.records)
    colocated = simulate(base)
    assert colocated.requests == result.requests and "prefill_replicas" not in colocated.row()


def test_a_split_must_leave_decode_replicas() -> None:
    with pytest.raises(ValueError, match="prefill_replicas 2 must leave decode replicas of 2"):
        FleetSim(SimConfig(replicas=2, prefill_replicas=2))


def test_the_disaggregation_verdict_names_the_layout_that_meets_both_slos() -> None:
    def row(share: float, ttft: float, itl: float, load: float = 1.0) -> dict:
        return {"trace": "rag-cold", "replicas": 8, "load": load, "prefill_share": share,
                "ttft_p95_ms": ttft, "itl_p95_ms": itl, "ttft_ok": ttft <= 700,
                "itl_ok": itl <= 50}

    rows = [row(0.0, 600, 370), row(0.25, 9000, 15), row(0.5, 650, 18),  # ITL: split wins
            row(0.0, 300, 20, 2.0), row(0.5, 900, 18, 2.0)]  # colocated alone meets both
    first, second = disagg_verdicts(rows)
    assert (first["winner"], first["best_prefill_share"]) == ("disaggregated", 0.5)
    assert first["ttft_p95_ms"] == (600, 650) and first["itl_p95_ms"] == (370, 18)
    assert second["winner"] == "colocated"
    table = "\n".join(disagg_markdown({"slo_ms": 700, "itl_slo_ms": 50, "rows": rows,
                                       "verdicts": [first, second]}))
    assert (first["lower_ttft"], first["lower_itl"]) == ("colocated", "25% prefill")
    assert "| rag-cold | 8 | 1x | 600 / 370 | 9000 / 15 | 650 / 18 |  | disaggregated (50% " \
        "prefill) | colocated | 25% prefill |" in table
