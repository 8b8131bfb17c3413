"""The second KV tier: a conversation pushed out of the pool, and sessions four times the pool.

    OMP_NUM_THREADS=2 python -m bench.engine.tier_bench [--repeats 3] [--out DIR]

In-process engines on the same weights (bfloat16, the CPU path the loader picks), each with
a small pool so that other traffic pushes blocks out; one without a tier, one with the
int8 RAM tier (`kv_offload_mb`), one with the disk tier (`kv_offload_dir`, a temporary
directory). Reported against the goals of issue 40:

1. resume: a 2,000-token conversation answers, other traffic (three 1,500-token prompts)
   pushes its blocks out of the pool, and its next turn arrives (the conversation, its
   answer, a new question): the share of that prompt reported as `cached_tokens` (>= 0.9)
   and its TTFT over the same turn's on the engine without a tier, which recomputes it
   (<= 0.3). The engines take turns, so drifting load from other processes weighs alike;
   CPU seconds to the first token are reported beside the wall clock. A fourth engine with
   a pool 8x as large (`pool`) keeps the conversation in its pool: the same turn there is a
   plain prefix hit, whose answer a lossless tier must give (greedy, identical), while the
   recomputing engine's may differ (its K/V of the first answer comes from one prefill
   chunk instead of decode steps, so the last bits differ).
2. sessions: 8 conversations of ~1,300 tokens each, three turns each in round robin, on
   the same pool of 2,560 tokens (the working set is 4x the pool): the prefix hit ratio
   (cached over prompt tokens, turns 2 and 3) with the tier over without it (>= 2).
3. the reload cost the fleet picker charges a tier hit (`PickerSettings.tier_reload_cost`):
   seconds to load a block back over seconds to compute its 16 tokens in a cold prefill.
Answers (greedy) are compared too: identical through the disk tier; through int8, the
share of answers identical to the recomputed ones (its per-token limits are tested in
tests/engine/test_kv_tier_store.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.engine.timing import random_prompt

POOL_BLOCKS = 160  # 2,560 tokens: the conversation fits, not beside the other traffic
TIER_MB = 512


def engines(tmp: str) -> dict:
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.weights import load_model

    loaded = load_model(None, "auto", "cpu")
    make = lambda **kw: LLMEngine(EngineConfig(num_kv_blocks=POOL_BLOCKS, **kw),  # noqa: E731
                                  loaded=loaded)
    return {"none": make(), "int8": make(kv_offload_mb=TIER_MB),
            "disk": make(kv_offload_mb=TIER_MB, kv_offload_dir=tmp),
            "pool": LLMEngine(EngineConfig(num_kv_blocks=8 * POOL_BLOCKS), loaded=loaded)}


def ask(engine, prompt: list[int], max_tokens: int = 16, cpu: list[float] | None = None):
    """One greedy request alone: (ttft seconds, cached tokens, prompt tokens, answer ids);
    the CPU seconds the process spent to the first token appended to `cpu`."""
    from engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    rid = engine.add_request(prompt, params)
    ttft, answer, first = None, [], None
    while engine.has_unfinished():
        for delta in engine.step():
            if delta.request_id != rid:
                continue
            if ttft is None:
                ttft, first = time.perf_counter() - start, delta
                if cpu is not None:
                    cpu.append(time.process_time() - start_cpu)
            answer += delta.token_ids
    return ttft, first.cached_tokens, first.prompt_tokens, answer


def resume(engs: dict, seed: int) -> dict:
    """Goal 1 on each engine, the same prompts."""
    conversation = random_prompt(2000, seed)
    question = random_prompt(40, seed + 1)
    others = [random_prompt(1500, seed + 2 + i) for i in range(3)]
    out = {}
    for name, engine in engs.items():
        _, _, _, answer = ask(engine, conversation)
        for other in others:
            ask(engine, other, 1)
        cpu: list[float] = []
        ttft, cached, prompt, answer2 = ask(engine, conversation + answer + question, cpu=cpu)
        out[name] = {"ttft_s": ttft, "cpu_s": cpu[0], "cached": cached, "prompt": prompt,
                     "answer": answer2}
    return out


def sessions(engine, seed: int, n: int = 8, context: int = 1280, turns: int = 3) -> float:
    """Goal 2: prefix hit ratio over turns after the first, sessions in round robin."""
    chats = [random_prompt(context, seed + i) for i in range(n)]
    hit = total = 0
    for turn in range(turns):
        for i in range(n):
            _, cached, prompt, answer = ask(engine, chats[i], 8)
            if turn:
                hit, total = hit + cached, total + prompt
            chats[i] = chats[i] + answer + random_prompt(24, seed + 1000 * turn + i)
    return hit / total


def reload_cost(engs: dict, seed: int) -> dict[str, float]:
    """Seconds to load one block back over seconds to compute one block's tokens cold."""
    cold = min(ask(engs["none"], random_prompt(2000, seed + r), 1)[0] for r in range(2))
    per_block_compute = cold / (2000 / 16)
    out = {}
    for name in ("int8", "disk"):
        store = engs[name].tier.store
        ids = list(range(125))
        store.save(ids, ids)
        start = time.perf_counter()
        store.load(ids, ids)
        out[name] = (time.perf_counter() - start) / 125 / per_block_compute
    return out


def run(repeats: int, resume_only: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        engs = engines(tmp)
        ask(engs["none"], random_prompt(64, 1), 2)  # warm up
        rounds = []
        for r in range(repeats):
            res = resume(engs, 10_000 * (r + 1))
            base, base_cpu = res["none"]["ttft_s"], res["none"]["cpu_s"]
            rounds.append({
                name: {"ttft_s": v["ttft_s"], "cached_share": v["cached"] / v["prompt"],
                       "ttft_over_recompute": v["ttft_s"] / base,
                       "cpu_over_recompute": v["cpu_s"] / base_cpu,
                       "answer_same": v["answer"] == res["pool"]["answer"]}
                for name, v in res.items()})
            print(f"[tier_bench] resume round {r}: " + ", ".join(
                f"{n} {v['ttft_s'] * 1000:.0f} ms cached {v['cached_share']:.2f}"
                for n, v in rounds[-1].items()), flush=True)
        hits = {} if resume_only else {name: sessions(engine, 777) for name, engine in engs.items()
                                       if name != "pool"}
        print(f"[tier_bench] sessions: {hits}", flush=True)
        cost = reload_cost(engs, 555)
        print(f"[tier_bench] reload cost: {cost}", flush=True)
        stats = {name: e.tier.stats().__dict__ for name, e in engs.items() if e.tier is not None}
    return {"pool_blocks": POOL_BLOCKS, "tier_mb": TIER_MB, "resume": rounds,
            "session_hit_ratio": hits, "reload_cost": cost, "tier_stats": stats}


def report(result: dict) -> str:
    lines = ["| tier | resume: cached share (>= 0.9) | resume TTFT / recompute (<= 0.3), "
             "median [min-max] | CPU to first token / recompute | answers as a pool hit's | "
             "session hit ratio | over no tier (>= 2) | reload cost per block |",
             "|---|---|---|---|---|---|---|---|"]
    hits = result["session_hit_ratio"] or {"none": 0.0, "int8": 0.0, "disk": 0.0}
    for name in ("none", "int8", "disk", "pool"):
        rows = [r[name] for r in result["resume"]]
        ratios = [r["ttft_over_recompute"] for r in rows]
        cpu = statistics.median(r["cpu_over_recompute"] for r in rows)
        share = min(r["cached_share"] for r in rows)
        same = sum(r["answer_same"] for r in rows)
        hit = hits.get(name, float("nan"))
        over = hit / hits["none"] if hits["none"] else float("inf")
        cost = result["reload_cost"].get(name)
        lines.append(
            f"| {name} | {share:.3f} | {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}-{max(ratios):.3f}] | {cpu:.3f} | {same}/{len(rows)} | "
            f"{hit:.3f} | "
            f"{over:.1f}x | {'' if cost is None else f'{cost:.3f}'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--resume-only", action="store_true", help="skip the sessions")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = run(args.repeats, args.resume_only)
    print(report(result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tier_bench.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
