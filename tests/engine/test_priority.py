"""The priority scheduling policy with tiny sizes: line order, displacement across classes
only, the oldest request's guarantee, budget order, and a request's priority checked."""

from __future__ import annotations

import random

import pytest

from engine.block_manager import KVCacheManager
from engine.errors import InvalidRequest
from engine.priority import ahead_of, check_priority
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from tests.engine.test_scheduler import new_tokens, step


def make(num_blocks: int = 32, budget: int = 64, max_num_seqs: int = 2,
         policy: str = "priority") -> Scheduler:
    return Scheduler(KVCacheManager(num_blocks, block_size=4), max_num_seqs, budget, policy)


def add(sched: Scheduler, name: str, priority: int, arrival: float, num_tokens: int = 4,
        max_tokens: int = 8) -> Sequence:
    start = 1000 * (1 + len(sched.waiting) + len(sched.running)) + int(arrival * 10)
    seq = Sequence(name, list(range(start, start + num_tokens)),
                   SamplingParams(max_tokens=max_tokens), arrival_time=arrival)
    seq.priority = priority
    sched.add(seq)
    return seq


def names(seqs) -> list[str]:
    return [s.request_id for s in seqs]


def test_the_line_is_kept_by_priority_then_arrival():
    sched = make(max_num_seqs=1)
    add(sched, "old", 10, 0.0, max_tokens=50)
    step(sched)  # the only one: runs
    add(sched, "b", 10, 1.0)
    add(sched, "c", 5, 3.0)
    add(sched, "i", 0, 2.0)
    add(sched, "a", 10, 0.5)
    assert names(sched.waiting) == ["i", "c", "a", "b"]


def test_a_better_class_displaces_the_last_ranked_when_the_running_set_is_full():
    sched = make(max_num_seqs=2)
    old = add(sched, "old", 10, 0.0, max_tokens=50)
    batch = add(sched, "batch", 10, 1.0, max_tokens=50)
    step(sched)
    add(sched, "chat", 0, 2.0)
    out = step(sched)
    assert names(out.preempted) == ["batch"]  # not `old`: the oldest is never displaced
    assert new_tokens(out) == {"chat": 4}  # the oldest waits out the chat's prompt step
    assert new_tokens(step(sched)) == {"old": 1, "chat": 1}
    assert batch.status is SequenceStatus.WAITING and batch.block_table == []
    assert (sched.num_preemptions, sched.num_priority_preemptions) == (1, 1)
    assert names(sched.running) == ["old", "chat"] and old.num_preemptions == 0
    sched.check()


def test_a_better_class_takes_the_budget_of_worse_decodes_which_wait_a_step():
    sched = make(budget=3, max_num_seqs=4)  # three decodes take the whole step
    batch = [add(sched, f"batch{i}", 10, float(i), num_tokens=3, max_tokens=50)
             for i in range(3)]
    while not all(b.num_output_tokens for b in batch):  # prompts read a token a step
        step(sched)
    add(sched, "chat", 0, 9.0, num_tokens=3)
    out = step(sched)
    # batch2's decode waits (no preemption, nothing to recompute), then batch1's too: a step
    # reading a better class's prompt carries no worse class's tokens, and the oldest's only
    # when it waited out the step before
    assert out.preempted == [] and sched.num_preemptions == 0
    assert new_tokens(out) == {"chat": 3}
    assert all(b.status is SequenceStatus.RUNNING for b in batch)
    assert new_tokens(step(sched)) == {"batch0": 1, "batch1": 1, "batch2": 1}
    sched.check()


def test_the_oldest_waiting_for_a_slot_of_its_class_holds_back_no_better_class():
    sched = make(max_num_seqs=2)
    add(sched, "b1", 10, 1.0, max_tokens=50)
    add(sched, "b2", 10, 2.0, max_tokens=50)
    step(sched)
    add(sched, "b0", 10, 0.0)  # back in line after a preemption: the oldest, first in rank
    add(sched, "chat", 0, 3.0)
    out = step(sched)
    assert names(out.preempted) == ["b2"] and "chat" in new_tokens(out)
    assert names(sched.waiting) == ["b0", "b2"]  # b0 waits for a slot of its own class


def test_equal_priorities_never_displace_each_other():
    sched = make(max_num_seqs=2)
    add(sched, "a", 3, 0.0, max_tokens=20)
    add(sched, "b", 3, 1.0, max_tokens=20)
    step(sched)
    add(sched, "c", 3, 0.5)  # arrived before b, same class: waits for a free slot
    for _ in range(5):
        assert not step(sched).preempted
    assert names(sched.waiting) == ["c"] and sched.num_preemptions == 0


def test_a_displaced_request_keeps_its_place_in_line():
    sched = make(max_num_seqs=2)
    add(sched, "old", 10, 0.0, max_tokens=50)
    add(sched, "b", 10, 2.0, max_tokens=50)
    step(sched)
    add(sched, "later", 10, 3.0)
    add(sched, "earlier", 10, 1.0)
    add(sched, "chat", 0, 4.0)
    step(sched)  # chat takes b's slot
    assert names(sched.waiting) == ["earlier", "b", "later"]


def test_blocks_run_short_the_worst_class_is_preempted_not_the_latest_arrival():
    # 4 blocks of 4 tokens, two 4-token prompts that grow; under fcfs `chat` (the latest
    # arrival) would be the one preempted when the pool runs dry.
    for policy, victim in (("priority", "batch"), ("fcfs", "chat")):
        sched = make(num_blocks=5, max_num_seqs=3, policy=policy)
        add(sched, "old", 0, 0.0, max_tokens=3)  # the oldest: never a victim
        add(sched, "batch", 10 if policy == "priority" else 0, 1.0, max_tokens=20)
        add(sched, "chat", 0, 2.0, max_tokens=20)
        preempted = []
        for _ in range(12):
            preempted += names(step(sched).preempted)
            sched.check()
        assert preempted[0] == victim, policy
        assert sched.num_priority_preemptions == 0  # blocks, not displacement


def test_a_better_class_reads_its_prompt_first_and_alone():
    sched = make(budget=16, max_num_seqs=4)
    add(sched, "old", 10, 0.0, max_tokens=50)
    step(sched), step(sched)  # its prompt, then a decode
    batch = add(sched, "batch", 10, 1.0, num_tokens=60, max_tokens=1)
    # no better class in the engine: batch work is scheduled as under fcfs
    assert new_tokens(step(sched)) == {"old": 1, "batch": 15}
    add(sched, "chat", 0, 2.0, num_tokens=6, max_tokens=2)
    add(sched, "chat-2", 0, 2.5, num_tokens=20, max_tokens=2)
    # the chats' prompts alone; batch reads nothing while a better class reads, even with
    # budget left (the chats' steps stay as short as on an idle engine), and the oldest
    # waits out one such step, never two in a row
    assert new_tokens(step(sched)) == {"chat": 6, "chat-2": 10}
    assert new_tokens(step(sched)) == {"old": 1, "chat": 1, "chat-2": 10}
    # while a chat decodes, batch steps are short: a chunk of 16 // 4 or a decode, by turns
    assert new_tokens(step(sched)) == {"chat-2": 1, "batch": 4}
    # the chats are done: batch work has the whole budget again
    assert new_tokens(step(sched)) == {"old": 1, "batch": 15}
    assert batch.status is SequenceStatus.RUNNING


def test_the_oldest_never_waits_two_steps_in_a_row_for_a_better_class():
    sched = make(num_blocks=64, budget=64, max_num_seqs=4)
    add(sched, "old", 10, 0.0, num_tokens=100, max_tokens=1)
    assert new_tokens(step(sched)) == {"old": 64}  # alone, the whole budget
    add(sched, "chat0", 0, 1.0, num_tokens=20)
    assert new_tokens(step(sched)) == {"chat0": 20}  # the chat's prompt alone
    add(sched, "chat1", 0, 2.0, num_tokens=20)
    # never starved, yet the chats' steps stay short: a block of the oldest's prompt
    assert new_tokens(step(sched)) == {"chat0": 1, "old": 4, "chat1": 20}
    add(sched, "chat2", 0, 3.0, num_tokens=20)
    assert new_tokens(step(sched)) == {"chat0": 1, "chat1": 1, "chat2": 20}
    assert new_tokens(step(sched))["old"] == 16  # 64 // 4 while chats decode


def test_a_step_that_preempts_for_blocks_admits_nobody():
    sched = make(num_blocks=32, budget=64, max_num_seqs=4)
    add(sched, "old", 10, 0.0, num_tokens=100, max_tokens=1)
    step(sched)  # 64 tokens: 16 of the 32 blocks
    add(sched, "chat0", 0, 1.0, num_tokens=20), step(sched)
    add(sched, "chat1", 0, 2.0, num_tokens=20), step(sched)
    chat2 = add(sched, "chat2", 0, 3.0, num_tokens=20)
    assert sched.kv.stats().free == 1
    # the oldest's chunk needs blocks: the last-ranked request gives them up, and no one
    # waiting is admitted into the room it left (memory is short: a newcomer would only
    # be preempted in turn), as under fcfs
    out = step(sched)
    assert names(out.preempted) == ["chat1"] and new_tokens(out) == {"chat0": 1, "old": 16}
    assert chat2.status is SequenceStatus.WAITING
    sched.check()


def test_the_oldest_request_runs_whatever_its_priority():
    # one slot and a chat request arriving every step: the batch request that arrived
    # second still finishes once it is the oldest
    sched = make(max_num_seqs=1)
    first = add(sched, "batch1", 10, 0.0, max_tokens=2)
    chat0 = add(sched, "chat0", 0, 0.1, max_tokens=2)
    second = add(sched, "batch2", 10, 0.2, max_tokens=2)
    assert new_tokens(step(sched)) == {"batch1": 4}  # the oldest goes first
    order = []
    for t in range(1, 40):
        add(sched, f"chat{t}", 0, 0.2 + t, max_tokens=2)
        step(sched)
        order += [s.request_id for s in (first, chat0, second)
                  if s.is_finished and s.request_id not in order]
        sched.check()
    assert order == ["batch1", "chat0", "batch2"]


def test_a_class_below_the_default_reads_short_chunks_only_beside_a_better_class():
    for priority, chat, chunks in ((10, True, [16, 16, 8]), (10, False, [40]),  # 64 // 4
                                   (0, True, [40]), (-3, True, [40])):
        sched = make(budget=64, max_num_seqs=2)
        seq = add(sched, "alone", priority, 0.0, num_tokens=40, max_tokens=1)
        if chat:  # decoding all along: batch steps stay short and take no leftover budget
            add(sched, "chat", 0, 1.0, num_tokens=4, max_tokens=20)
        got = []
        while not seq.is_finished:
            got += [n for name, n in new_tokens(step(sched)).items() if name == "alone"]
        assert got == chunks, (priority, chat)


def test_a_mixed_workload_keeps_the_books_and_never_displaces_within_a_class():
    rng = random.Random(7)
    sched = make(num_blocks=24, budget=12, max_num_seqs=4)
    seqs = []
    for t in range(600):
        if t < 150 and rng.random() < 0.4:
            seqs.append(add(sched, f"r{t}", rng.choice((0, 0, 5, 10)), float(t),
                            num_tokens=rng.randint(2, 20), max_tokens=rng.randint(1, 12)))
        running = {s.request_id: s.priority for s in sched.running}
        out = step(sched)
        for victim in out.preempted:  # only worse classes, or the one short of blocks
            assert victim.priority >= min(running.values())
        sched.check()
    assert not sched.has_unfinished()
    assert all(s.output_token_ids == [7] * s.params.max_tokens for s in seqs)
    assert sched.kv.stats().used == 0


def test_a_request_priority_is_checked_against_the_policy():
    assert check_priority(0, "fcfs") == 0 and check_priority(-3, "priority") == -3
    for bad, policy, fragment in ((3, "fcfs", "--scheduling-policy priority"),
                                  (True, "priority", "integer"), ("1", "priority", "integer"),
                                  (2 ** 31, "priority", "between")):
        with pytest.raises(InvalidRequest, match=fragment) as err:
            check_priority(bad, policy)
        assert err.value.param == "priority"
    with pytest.raises(ValueError, match="scheduling_policy"):
        make(policy="lottery")


def test_the_wait_estimate_counts_only_the_class_and_better_and_the_oldest():
    def seq(name: str, priority: int, arrival: float) -> Sequence:
        s = Sequence(name, [1, 2, 3], SamplingParams(), arrival_time=arrival)
        s.priority = priority
        return s

    running = [seq("old", 10, 0.0), seq("batch", 10, 1.0), seq("chat", 0, 2.0)]
    waiting = [seq("b2", 10, 3.0), seq("c2", 0, 4.0), seq("c1", -1, 5.0)]
    ahead_running, ahead_waiting = ahead_of(0, running, waiting)
    assert names(ahead_running) == ["old", "chat"]
    assert names(ahead_waiting) == ["c1", "c2"]
    assert [names(x) for x in ahead_of(10, running, waiting)] == [
        ["old", "batch", "chat"], ["c1", "c2", "b2"]]
