"""Windowing invariants with the engine's real tokenizer: budget, system prompt, tool pairs,
last turn, 413 with the excess, middle trimming, and a byte-stable prefix across turns."""

from __future__ import annotations

import pytest

from prompts.window import ContextOverflow, WindowSettings, plan_window


def conversation(turns: int, words: int = 40) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a careful assistant."}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Question {t}: " + f"detail{t} " * words})
        msgs.append({"role": "assistant", "content": f"Answer {t}: " + f"reply{t} " * words})
    msgs.append({"role": "user", "content": "Final question: what did we decide?"})
    return msgs


def with_tools(turns: int) -> list[dict]:
    msgs = conversation(turns)[:-1]
    for t in range(3):
        call = {"id": f"call_{t}", "type": "function",
                "function": {"name": "lookup", "arguments": f'{{"q": {t}}}'}}
        msgs.append({"role": "user", "content": f"Look up item {t} " + "please " * 30})
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": "result " * 40})
        msgs.append({"role": "assistant", "content": f"Item {t} found " + "ok " * 20})
    msgs.append({"role": "user", "content": "Summarise the items."})
    return msgs


@pytest.mark.parametrize("budget", [300, 600, 1200])
@pytest.mark.parametrize("anchored", [True, False])
def test_invariants(engine_counter, budget, anchored):
    msgs = with_tools(12)
    plan = plan_window(msgs, engine_counter, WindowSettings(budget, anchored=anchored))
    kept = plan.messages
    assert engine_counter.count_messages(kept) <= budget
    assert plan.tokens == engine_counter.count_messages(kept)
    assert kept[0] == msgs[0]  # system prompt kept
    assert kept[-1] == msgs[-1]  # last user turn kept
    assert kept[1:] == msgs[len(msgs) - len(kept) + 1:]  # a contiguous suffix, in order
    assert plan.dropped == msgs[1:len(msgs) - len(kept) + 1]
    assert kept[1]["role"] == "user"  # the window opens with a user turn
    for i, m in enumerate(kept):
        if m["role"] == "tool":
            assert any(c["id"] == m["tool_call_id"]
                       for prev in kept[:i] for c in prev.get("tool_calls") or [])


def test_no_user_turn_at_all(engine_counter):
    msgs = [{"role": "system", "content": "S"}] + [
        {"role": "assistant", "content": "note " * 100} for _ in range(3)]
    plan = plan_window(msgs, engine_counter, WindowSettings(150))
    assert plan.messages == [msgs[0], msgs[-1]] and plan.tokens <= 150


def test_under_budget_is_untouched(engine_counter):
    msgs = conversation(2)
    plan = plan_window(msgs, engine_counter, WindowSettings(10_000))
    assert plan.messages == msgs and not plan.dropped


def test_overflow_says_by_how_much(engine_counter):
    msgs = [{"role": "system", "content": "S " * 50}, {"role": "user", "content": "long " * 400}]
    needed = engine_counter.count_messages(msgs)
    with pytest.raises(ContextOverflow) as info:
        plan_window(msgs, engine_counter, WindowSettings(200))
    assert info.value.excess == needed - 200
    assert f"{needed - 200} more" in str(info.value)


def test_trim_middle_keeps_head_and_tail(engine_counter):
    text = "HEAD " + "filler " * 600 + " TAIL"
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": text}]
    plan = plan_window(msgs, engine_counter, WindowSettings(300, trim_middle=True))
    content = plan.messages[-1]["content"]
    assert content.startswith("HEAD") and content.endswith("TAIL") and "trimmed" in content
    assert engine_counter.count_messages(plan.messages) <= 300 and plan.trimmed_tokens > 0


def test_reserve_leaves_room_for_a_summary(engine_counter):
    msgs = conversation(20)
    plan = plan_window(msgs, engine_counter, WindowSettings(800, reserve_tokens=100))
    assert engine_counter.count_messages(plan.with_summary("x " * 90)) <= 800


def prefix_reuse(counter, settings: WindowSettings, turns: int) -> tuple[float, int]:
    """Share of each request's prompt tokens equal to the previous request's start, over a
    growing conversation (what a prefix cache can reuse), and the number of cut moves."""
    tok = counter.tokenizer
    previous: list[int] = []
    reused = total = moves = 0
    last_cut = None
    for t in range(2, turns):
        plan = plan_window(conversation(t), counter, settings)
        ids = tok.encode(tok.apply_chat_template(plan.messages))
        common = 0
        for a, b in zip(ids, previous, strict=False):
            if a != b:
                break
            common += 1
        reused, total = reused + common, total + len(ids)
        moves += last_cut is not None and len(plan.dropped) != last_cut
        last_cut, previous = len(plan.dropped), ids
    return reused / total, moves


def test_anchored_window_keeps_prefix_byte_stable(engine_counter):
    anchored, moves_a = prefix_reuse(engine_counter, WindowSettings(1500, low_water=0.5), 40)
    sliding, moves_s = prefix_reuse(engine_counter, WindowSettings(1500, anchored=False), 40)
    assert moves_a < moves_s / 3  # the cut moves in coarse steps
    assert anchored > 0.6 and sliding < 0.3 and anchored > 2 * sliding


def test_anchored_cut_is_a_function_of_history(engine_counter):
    """The same history gives the same window, and a new turn only appends to it (until the
    next jump): later requests start byte-identically."""
    settings = WindowSettings(1500, low_water=0.5)
    stable = 0
    for t in range(10, 30):
        a = plan_window(conversation(t), engine_counter, settings)
        b = plan_window(conversation(t + 1), engine_counter, settings)
        if len(a.dropped) == len(b.dropped):
            stable += 1
            assert b.messages[: len(a.messages) - 1] == a.messages[:-1]
    assert stable >= 12
