"""Priorities through the real engine: `EngineConfig.scheduling_policy`, the request field
`priority` on the engine's server (a 400 under fcfs), and the order requests finish in."""

from __future__ import annotations

import openai
import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.serving.server import create_engine_app, engine_config, parse_args
from tests.engine.test_serving_server import ThreadServer

MESSAGES = [{"role": "user", "content": "Name a colour."}]


def test_a_better_class_finishes_before_a_worse_one_that_arrived_earlier(smollm_bf16):
    loaded = tuple(smollm_bf16)
    waves = {}
    for policy in ("fcfs", "priority"):
        engine = LLMEngine(EngineConfig(kv_cache_memory_mb=32, max_num_seqs=2,
                                        scheduling_policy=policy), loaded=loaded)
        params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
        for name, priority in (("batch-1", 10), ("batch-2", 10), ("batch-3", 10), ("chat", 0)):
            seq = engine.make_sequence("Tell me about " + name, params, name)
            seq.priority = priority if policy == "priority" else 0
            engine.add_sequence(seq)
        finished = []
        while engine.has_unfinished():
            if done := sorted(d.request_id for d in engine.step() if d.finish_reason):
                finished.append(done)
        waves[policy] = finished
    assert waves["fcfs"] == [["batch-1", "batch-2"], ["batch-3", "chat"]]
    # batch-1 is the oldest and keeps a slot (it waits out the chat's prompt step, one
    # step, so the chat's last token comes a step ahead of its own); chat takes the other,
    # ahead of batch-2
    assert waves["priority"] == [["chat"], ["batch-1"], ["batch-2"], ["batch-3"]]


def test_a_batch_step_stops_between_layers_when_a_better_class_arrives(smollm_bf16):
    """A request of a better class arriving while a step of batch work runs stops that step
    at its next layer (the request gets the next step); nothing the cut step wrote counts:
    both answers are those of an engine where the chat arrived just before that step."""
    loaded = tuple(smollm_bf16)
    ids = smollm_bf16.tokenizer.encode("Rivers carve valleys over thousands of years. " * 20)
    greedy = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)

    def run(cut: bool) -> tuple[LLMEngine, dict[str, list[int]]]:
        llm = LLMEngine(EngineConfig(num_kv_blocks=64, scheduling_policy="priority"),
                        loaded=loaded)
        batch = llm.make_sequence(ids[:160], greedy, "batch")
        batch.priority = 10
        llm.add_sequence(batch)
        if cut:  # the chat's arrival lands inside the step, when layer 3 is about to run
            hook = llm.runner.model.layers[3].register_forward_pre_hook(
                lambda *_: llm.note_arrival(0))
            assert llm.step() == [] and llm.step_interrupted
            hook.remove()
            assert batch.num_computed_tokens == 0 and llm.num_interrupted_steps == 1
        llm.add_sequence(llm.make_sequence(ids[:40], greedy, "chat"))
        tokens: dict[str, list[int]] = {"batch": [], "chat": []}
        while llm.has_unfinished():
            for delta in llm.step():
                tokens[delta.request_id] += delta.token_ids
        llm.scheduler.check()
        return llm, tokens

    _, expected = run(cut=False)
    llm, got = run(cut=True)
    assert got == expected  # the chat's steps are not cut
    assert llm.num_interrupted_steps == llm.stats().num_interrupted_steps == 1


def test_a_step_reading_a_prompt_of_the_arrivals_class_runs_on(smollm_bf16):
    """A chat arriving while another chat's prompt is read beside batch work waits for
    that step instead of throwing the prompt away (the two would then share a longer
    step); a batch decode alone in a step would still be cut."""
    ids = smollm_bf16.tokenizer.encode("Rivers carve valleys over thousands of years. " * 20)
    greedy = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    llm = LLMEngine(EngineConfig(num_kv_blocks=64, scheduling_policy="priority"),
                    loaded=tuple(smollm_bf16))
    batch = llm.make_sequence(ids[:20], greedy, "batch")
    batch.priority = 10
    llm.add_sequence(batch)
    llm.step()  # the batch request's prompt: it decodes from now on
    llm.add_sequence(llm.make_sequence(ids[:30], greedy, "chat-1"))
    assert {d.request_id for d in llm.step()} == {"chat-1"}  # the oldest waits one step
    llm.add_sequence(llm.make_sequence(ids[:120], greedy, "chat-2"))
    hook = llm.runner.model.layers[3].register_forward_pre_hook(lambda *_: llm.note_arrival(0))
    deltas = llm.step()  # chat-2's prompt beside the decodes of chat-1 and of the oldest
    assert not llm.step_interrupted
    assert {d.request_id for d in deltas} == {"batch", "chat-1", "chat-2"}
    hook.remove()
    llm.abort("chat-1"), llm.abort("chat-2")
    arrives_mid_step(llm, 0)
    assert llm.step() == [] and llm.step_interrupted  # the batch decode alone: cut
    assert llm.num_interrupted_steps == 1


def arrives_mid_step(llm: LLMEngine, priority: int) -> None:
    """A request of `priority` arrives during the next step, after it was planned (in the
    one-call decode kernel, no layer hook would run)."""
    plan = llm.scheduler.schedule

    def planned_then_arrival():
        llm.scheduler.schedule = plan
        out = plan()
        llm.note_arrival(priority)
        return out

    llm.scheduler.schedule = planned_then_arrival


def test_a_decode_step_in_the_one_call_kernel_stops_for_a_better_class(smollm_bf16):
    """The one-call decode kernel (cpu_kernels/decode_layers.cpp, where it is built) checks
    for a better arrival between its layers as the Python path does: the cut step counts
    for nothing and the answer is the uncut one's."""
    ids = smollm_bf16.tokenizer.encode("Rivers carve valleys over thousands of years. " * 4)
    greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)

    def run(cut_at: int | None) -> tuple[LLMEngine, list[int]]:
        llm = LLMEngine(EngineConfig(num_kv_blocks=64, scheduling_policy="priority"),
                        loaded=tuple(smollm_bf16))
        batch = llm.make_sequence(ids, greedy, "batch")
        batch.priority = 10
        llm.add_sequence(batch)
        tokens: list[int] = []
        while llm.has_unfinished():
            if len(tokens) == cut_at:
                arrives_mid_step(llm, 0)
                assert llm.step() == [] and llm.step_interrupted
                cut_at = None
            for delta in llm.step():
                tokens += delta.token_ids
        return llm, tokens

    _, expected = run(None)
    llm, got = run(3)  # during the fourth token's decode step
    assert got == expected and llm.num_interrupted_steps == 1


def test_the_scheduling_policy_flag_and_its_bad_values():
    assert engine_config(parse_args(["--scheduling-policy", "priority"])).scheduling_policy \
        == "priority"
    assert engine_config(parse_args([])).scheduling_policy == "fcfs"
    with pytest.raises(SystemExit):
        parse_args(["--scheduling-policy", "lottery"])
    with pytest.raises(ValueError, match="scheduling_policy must be one of fcfs, priority"):
        EngineConfig(scheduling_policy="lottery")


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_the_server_takes_priority_in_the_body(smollm_bf16, policy):
    engine = AsyncEngine(EngineConfig(kv_cache_memory_mb=32, scheduling_policy=policy),
                         loaded=tuple(smollm_bf16))
    server = ThreadServer(create_engine_app(engine, owns_engine=True)).start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                               max_retries=0, timeout=120)

        def ask(priority) -> str | None:
            answer = client.chat.completions.create(
                model="smollm2-135m-instruct", messages=MESSAGES, max_tokens=2,
                temperature=0, extra_body={"priority": priority})
            return answer.choices[0].finish_reason

        assert ask(0) == "length"
        if policy == "priority":
            assert ask(10) == ask(-5) == "length"
        else:
            with pytest.raises(openai.BadRequestError) as err:
                ask(3)
            assert err.value.body["param"] == "priority"
            assert "--scheduling-policy priority" in err.value.body["message"]
        with pytest.raises(openai.BadRequestError) as err:
            ask("high")
        assert "priority" in str(err.value.body)
        completion = client.completions.create(model="smollm2-135m-instruct", prompt="Hi",
                                               max_tokens=1, extra_body={"priority": 0})
        assert completion.choices[0].finish_reason == "length"
    finally:
        server.stop()
