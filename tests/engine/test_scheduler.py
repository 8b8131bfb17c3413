"""Scheduler on its own with tiny sizes: budgets, decodes-first, chunked prefill, preemption."""

from __future__ import annotations

import random

from engine.block_manager import KVCacheManager
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import HandedPrompt, Sequence, SequenceStatus

NEXT_TOKEN = 7


def make_scheduler(num_blocks: int = 16, budget: int = 8, max_num_seqs: int = 4) -> Scheduler:
    return Scheduler(KVCacheManager(num_blocks, block_size=4), max_num_seqs, budget)


def add(sched: Scheduler, name: str, num_tokens: int, max_tokens: int = 4,
        start: int = 0, arrival: float | None = None) -> Sequence:
    seq = Sequence(name, list(range(start, start + num_tokens)),
                   SamplingParams(max_tokens=max_tokens), arrival_time=arrival)
    sched.add(seq)
    return seq


def step(sched: Scheduler) -> SchedulerOutput:
    """One engine step without a model: every sampling sequence gets NEXT_TOKEN."""
    out = sched.schedule()
    sched.update(out)
    for item in out.scheduled:
        if item.samples:
            item.seq.append_token(NEXT_TOKEN)
            if item.seq.num_output_tokens >= item.seq.params.max_tokens:
                sched.finish(item.seq, "length")
    return out


def new_tokens(out: SchedulerOutput) -> dict[str, int]:
    return {item.seq.request_id: item.num_new_tokens for item in out.scheduled}


def test_prefill_then_decode() -> None:
    sched = make_scheduler()
    a = add(sched, "a", 6, max_tokens=3)
    out = step(sched)
    assert new_tokens(out) == {"a": 6} and out.scheduled[0].samples
    assert new_tokens(step(sched)) == {"a": 1}
    step(sched)
    assert a.is_finished and a.output_token_ids == [NEXT_TOKEN] * 3
    assert not sched.has_unfinished()
    assert sched.kv.stats().used == 0


def test_budget_respected_every_step_and_cap_on_running() -> None:
    sched = make_scheduler(num_blocks=64, budget=8, max_num_seqs=3)
    for i in range(6):
        add(sched, f"r{i}", 5 + i, max_tokens=3, start=100 * i)
    steps = 0
    while sched.has_unfinished():
        out = step(sched)
        steps += 1
        assert 0 < out.num_batched_tokens <= 8 + sched.tail_tokens  # a prompt's tail: 1
        assert len(sched.running) <= 3
        assert steps < 100
    assert sched.kv.stats().used == 0


def test_a_prompt_reads_a_short_tail_in_its_last_chunk_past_the_budget() -> None:
    sched = make_scheduler(num_blocks=64, budget=16)  # a tail of up to 2 tokens
    assert sched.tail_tokens == 2
    a = add(sched, "a", 18, max_tokens=1)
    assert new_tokens(step(sched)) == {"a": 18}  # one step, not 16 + 2
    assert a.is_finished
    add(sched, "b", 19, max_tokens=1, start=100)
    assert new_tokens(step(sched)) == {"b": 16}
    assert new_tokens(step(sched)) == {"b": 3}


def test_decodes_keep_flowing_while_long_prompt_prefills_in_chunks() -> None:
    sched = make_scheduler(num_blocks=32, budget=8)
    short = [add(sched, f"s{i}", 3, max_tokens=20, start=10 * i) for i in range(2)]
    step(sched)  # both short prompts prefilled (6 tokens)
    long = add(sched, "long", 40, max_tokens=1, start=500)
    chunks = []
    while not long.is_finished:
        out = step(sched)
        got = new_tokens(out)
        assert got["s0"] == 1 and got["s1"] == 1  # decodes first, every step
        chunks.append(got["long"])
    assert chunks == [6, 6, 6, 6, 6, 6, 4]  # 40 tokens in budget-minus-decodes chunks
    assert all(s.num_output_tokens == 8 for s in short)


def test_only_the_final_chunk_samples() -> None:
    sched = make_scheduler(num_blocks=32, budget=8)
    add(sched, "long", 20, max_tokens=2)
    flags = [step(sched).scheduled[0].samples for _ in range(3)]
    assert flags == [False, False, True]


def test_prefix_hit_skips_cached_tokens() -> None:
    sched = make_scheduler(num_blocks=32, budget=64)
    a = add(sched, "a", 13, max_tokens=1)
    step(sched)
    assert a.is_finished
    b = add(sched, "b", 14, max_tokens=1)  # same first 13 tokens: 3 full blocks cached
    out = step(sched)
    assert new_tokens(out) == {"b": 2} and b.num_cached_tokens == 12


def test_preemption_then_completion() -> None:
    # 6 blocks of 4 tokens: two sequences that each grow to 12 tokens cannot both fit.
    sched = make_scheduler(num_blocks=6, budget=16)
    first = add(sched, "first", 8, max_tokens=8, start=0, arrival=1.0)
    second = add(sched, "second", 8, max_tokens=8, start=100, arrival=2.0)
    preempted = []
    for _ in range(100):
        if not sched.has_unfinished():
            break
        out = step(sched)
        preempted += [s.request_id for s in out.preempted]
        assert sched.kv.stats().used <= 6
    assert not sched.has_unfinished()
    assert preempted and set(preempted) == {"second"}  # the most recently arrived is preempted
    assert first.output_token_ids == [NEXT_TOKEN] * 8
    assert second.output_token_ids == [NEXT_TOKEN] * 8
    assert second.num_preemptions >= 1 and sched.num_preemptions == len(preempted)
    assert sched.kv.stats().used == 0


def test_abort_frees_every_block_running_or_waiting() -> None:
    sched = make_scheduler(num_blocks=16, budget=8, max_num_seqs=1)
    running = add(sched, "run", 10, max_tokens=50)
    waiting = add(sched, "wait", 10, max_tokens=50, start=100)
    step(sched)
    assert running.status is SequenceStatus.RUNNING and waiting.status is SequenceStatus.WAITING
    assert sched.kv.stats().used == 2  # the first 8-token chunk of "run"
    assert sched.abort("run") is running
    assert sched.abort("wait") is waiting
    assert sched.abort("nobody") is None
    assert running.finish_reason == "abort" and running.block_table == []
    assert sched.kv.stats().used == 0 and not sched.has_unfinished()


def test_short_prompt_is_not_stuck_behind_a_long_prefill() -> None:
    sched = make_scheduler(num_blocks=32, budget=8)
    long = add(sched, "long", 40, max_tokens=1)
    assert new_tokens(step(sched)) == {"long": 8}  # alone: the whole budget
    short = add(sched, "short", 3, max_tokens=2, start=500)
    # While one waits, the long prefill is capped at half the budget; the rest goes back to it.
    assert new_tokens(step(sched)) == {"long": 5, "short": 3}
    assert new_tokens(step(sched)) == {"short": 1, "long": 7}
    assert short.is_finished and not long.is_finished


def test_same_prefix_arriving_together_is_computed_once() -> None:
    sched = make_scheduler(num_blocks=32, budget=8)
    first = add(sched, "first", 40, max_tokens=1)
    twin = add(sched, "twin", 40, max_tokens=1)
    twin_tokens = []
    while sched.has_unfinished():
        got = new_tokens(step(sched))
        if "twin" not in got:
            assert got.get("first") == 8  # the waiting twin does not hold the budget back
        twin_tokens.append(got.get("twin", 0))
    assert first.num_cached_tokens == 0
    assert twin.num_cached_tokens == 36 and sum(twin_tokens) == 4


def test_twins_that_fit_one_step_go_together() -> None:
    for caching in (True, False):  # waiting would only delay the second one's first token
        sched = Scheduler(KVCacheManager(32, 4, enable_prefix_caching=caching), 4, 80)
        add(sched, "a", 40, max_tokens=1)
        add(sched, "b", 40, max_tokens=1)
        assert new_tokens(step(sched)) == {"a": 40, "b": 40}


def full_pool() -> tuple[Scheduler, Sequence, Sequence, Sequence]:
    """4 blocks of 4 tokens, 2 running slots. `first` and `second` (4-token prompts, 8 tokens
    each to write) fill the pool with 9 tokens apiece (blocks [0, 2] and [1, 3]); `third`
    waits for a slot. The next step `first` needs a third block."""
    sched = make_scheduler(num_blocks=4, budget=16, max_num_seqs=2)
    first = add(sched, "first", 4, max_tokens=8, start=0, arrival=1.0)
    second = add(sched, "second", 4, max_tokens=8, start=100, arrival=2.0)
    third = add(sched, "third", 4, max_tokens=8, start=200, arrival=3.0)
    for _ in range(5):
        step(sched)
        sched.check()
    assert (first.block_table, second.block_table, first.num_tokens) == ([0, 2], [1, 3], 9)
    assert sched.kv.stats().free == 0 and list(sched.waiting) == [third]
    return sched, first, second, third


def test_the_latest_arrival_is_preempted_to_make_room_for_an_earlier_one():
    sched, first, second, third = full_pool()
    out = step(sched)
    # second's blocks are released tail first (3, then 1); first evicts the older one, 3
    assert out.preempted == [second] and new_tokens(out) == {"first": 1}
    assert first.block_table == [0, 2, 3] and second.block_table == []
    assert list(sched.kv.evictable) == [1]  # second's prompt block, still reusable
    assert list(sched.waiting) == [second, third]  # the preempted one goes first
    sched.check()


def test_a_step_that_preempted_admits_nobody():
    # a slot and 15 tokens of budget are free, but the pool is short: admitting now would
    # only preempt again
    sched, *_ = full_pool()
    out = step(sched)
    assert out.preempted and out.num_batched_tokens == 1
    assert len(sched.running) == 1 and len(sched.waiting) == 2


def test_a_waiting_request_that_does_not_fit_holds_back_the_ones_behind_it():
    # second needs 2 blocks beside its cached one, only 1 is left; third needs 1 but waits
    # its turn: first come, first served
    sched, first, second, third = full_pool()
    step(sched)
    assert new_tokens(step(sched)) == {"first": 1}
    assert list(sched.waiting) == [second, third]
    sched.check()


def test_a_recomputed_sequence_reuses_its_blocks_and_keeps_its_first_figures():
    sched, first, second, third = full_pool()
    scheduled_at = second.first_scheduled_time
    for _ in range(3):
        step(sched)  # second preempted, then first runs alone until it finishes
    assert first.is_finished and list(sched.kv.evictable) == [1, 2, 0]
    out = step(sched)
    # second computes its 9 tokens again but its prompt block 1 (cached), then third is in
    assert new_tokens(out) == {"second": 5, "third": 4}
    assert second.block_table == [1, 3, 2] and third.block_table == [0]
    assert second.num_preemptions == 1 and second.num_cached_tokens == 0  # as first admitted
    assert second.first_scheduled_time == scheduled_at
    sched.check()


def test_the_latest_arrival_preempts_itself_when_it_needs_the_room():
    sched, first, second, third = full_pool()
    for _ in range(4):
        step(sched)  # second preempted, first finishes, second and third admitted
    out = step(sched)  # third's 5th token needs a block; nobody arrived later than third
    assert out.preempted == [third] and new_tokens(out) == {"second": 1}
    assert third.block_table == [] and list(sched.waiting) == [third]
    sched.check()


def test_the_prefill_cap_applies_only_while_a_running_slot_is_free():
    # one slot, taken by the long prompt: the short one cannot start anyway, so the long
    # prefill keeps the whole budget
    sched = make_scheduler(num_blocks=32, budget=8, max_num_seqs=1)
    add(sched, "long", 40, max_tokens=1)
    step(sched)
    add(sched, "short", 3, max_tokens=2, start=500)
    assert new_tokens(step(sched)) == {"long": 8}


def test_bookkeeping_stays_consistent_through_a_mixed_workload():
    # 30 requests arriving over time in a 12-block pool: shared prefixes, chunked prefills,
    # preemptions, aborts. Every step the queues and every block are audited.
    rng = random.Random(7)
    sched = Scheduler(KVCacheManager(12, block_size=4), max_num_seqs=4,
                      max_num_batched_tokens=16)
    prefixes = [list(range(p * 100, p * 100 + 8)) for p in range(3)]
    seqs: list[Sequence] = []
    steps = 0
    while steps < 400 and (len(seqs) < 30 or sched.has_unfinished()):
        steps += 1
        if len(seqs) < 30 and rng.random() < 0.5:
            body = [1000 + rng.randrange(50) for _ in range(rng.randrange(1, 20))]
            prompt = (rng.choice(prefixes) if rng.random() < 0.5 else []) + body
            seqs.append(add_tokens(sched, f"s{len(seqs)}", prompt, rng.randrange(1, 12),
                                   arrival=float(len(seqs) + 1)))
        if sched.running and rng.random() < 0.05:
            sched.abort(rng.choice(sched.running).request_id)
        out = step(sched)
        sched.check()
        assert out.num_batched_tokens <= 16 + sched.tail_tokens
    assert steps == 91 and sched.num_preemptions == 9
    assert sum(s.finish_reason == "abort" for s in seqs) == 2
    assert all(s.finish_reason == "abort" or s.num_output_tokens == s.params.max_tokens
               for s in seqs)
    assert sum(s.num_cached_tokens for s in seqs) == 32
    assert sched.kv.stats().used == 0


def add_tokens(sched: Scheduler, name: str, prompt: list[int], max_tokens: int,
               arrival: float) -> Sequence:
    seq = Sequence(name, prompt, SamplingParams(max_tokens=max_tokens), arrival_time=arrival)
    sched.add(seq)
    return seq


def test_a_handed_prompt_loads_its_tail_and_decodes_its_first_token() -> None:
    """A prompt another engine read comes with its first token and its last partial block's
    K/V (engine/serving/kv_transfer.py): once its full blocks are cached, the step loads
    the tail into the sequence's own block and computes only the handed token."""
    sched = make_scheduler(budget=16)
    a = add(sched, "a", 10, max_tokens=1)  # the full blocks [0-3] [4-7] end up cached
    step(sched)
    assert a.is_finished
    b = Sequence("b", list(range(10)), SamplingParams(max_tokens=4))
    b.handed = HandedPrompt(first_token=99, tail="K/V of tokens 8, 9")
    sched.add(b)
    b.append_token(99)  # the engine sends the handed token at once (LLMEngine.add_sequence)
    out = step(sched)
    assert new_tokens(out) == {"b": 1} and out.scheduled[0].samples
    assert b.block_table == [0, 1, 3] and out.tail_loads == [(3, "K/V of tokens 8, 9")]
    assert b.num_cached_tokens == 10 and b.handed.tail is None
    assert b.output_token_ids == [99, NEXT_TOKEN]


def test_a_handed_tail_is_dropped_when_its_prefix_is_not_cached() -> None:
    sched = make_scheduler()
    c = Sequence("c", list(range(100, 110)), SamplingParams(max_tokens=4))
    c.handed = HandedPrompt(first_token=99, tail="K/V of tokens 108, 109")
    sched.add(c)
    c.append_token(99)
    out = step(sched)
    assert new_tokens(out) == {"c": 8} and out.tail_loads == []  # computed, in chunks
    assert c.handed.tail is None and c.num_cached_tokens == 0
