"""What grammar-constrained decoding costs the bundled engine, measured in one run.

- **Decode at batch 8**: eight greedy sequences decode together, all constrained by a JSON
  schema (a long string property keeps every one alive), against the same eight without a
  grammar. The figure is the median decode step with masks over the median without, and
  the fastest over the fastest (the step others on the machine disturbed least); the rounds
  alternate, so both see the same machine. Goal: <= 1.15.
- **A new schema's first token**: the work a request with a schema the engine has never seen
  does beyond the same request without one before its first token (compiling the matcher,
  the first step's mask), median over the suite's schemas, and the same for the schema
  again (compiled already). Goals: <= 50 ms added, <= 1 ms for a repeat.
- **Parts**: compiling each suite schema (llguidance, fresh), a matcher from the cache, and
  one batch-8 mask.

Each figure is given by the wall clock and by the process's CPU time (`time.process_time`,
every thread): on a machine others share, the CPU time is the steadier of the two.

    OMP_NUM_THREADS=2 python -m bench.engine.structured_bench [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from engine.config import EngineConfig
from engine.grammar import GrammarCompiler, apply_grammar_masks, json_schema_grammar
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.schema_suite import SCHEMA_SUITE

BATCH = 8
LONG_STRING = {"type": "object", "properties": {"story": {"type": "string", "minLength": 2000}},
               "required": ["story"]}
PARAM = "response_format.json_schema.schema"


def chat(engine: LLMEngine, text: str) -> list[int]:
    return engine.tokenizer.encode(
        engine.tokenizer.apply_chat_template([{"role": "user", "content": text}]))


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = clocks()
    return wall - start[0], cpu - start[1]


def decode_steps(engine: LLMEngine, masked: bool, tokens: int) -> list[tuple[float, float]]:
    """(wall, cpu) seconds per step once all BATCH sequences decode (prefill steps left out)."""
    grammar = json_schema_grammar(LONG_STRING, PARAM) if masked else None
    for i in range(BATCH):
        engine.add_request(chat(engine, f"Tell story number {i} about a cat."),
                           SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True,
                                          grammar=grammar))
    times = []
    while engine.has_unfinished():
        decoding = all(s.num_output_tokens > 0 for s in engine.scheduler.running) \
            and len(engine.scheduler.running) == BATCH
        start = clocks()
        engine.step()
        if decoding:
            times.append(since(start))
    return times


def medians(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))


def added_work(engine: LLMEngine, rounds: int) -> dict[str, float]:
    """What a constrained request does beyond a plain one before its first token (ms): the
    matcher in `make_sequence` (a compile for a schema never seen, a copy for a repeat) and
    the first step's mask. Everything else on the way to the first token is the same work,
    so this is the time a schema adds, measured without the noise of the prefill around it."""
    logits = torch.zeros(1, engine.model_config.vocab_size)
    new, repeat = [], []
    for round_ in range(rounds):
        for name, question, schema in SCHEMA_SUITE:
            ids = chat(engine, question)
            spec = json_schema_grammar({**schema, "description": f"{name} {round_} "
                                        f"{time.time_ns()}"}, PARAM)  # never seen
            for out in (new, repeat):
                start = clocks()
                plain = engine.make_sequence(ids, SamplingParams(max_tokens=1, temperature=0))
                plain_s = since(start)
                start = clocks()
                seq = engine.make_sequence(ids, SamplingParams(max_tokens=1, temperature=0,
                                                               grammar=spec))
                apply_grammar_masks(logits, [seq.grammar])
                constrained_s = since(start)
                out.append(tuple((c - p) * 1e3 for c, p in zip(constrained_s, plain_s,
                                                                strict=True)))
                del plain
    (new_wall, new_cpu), (again_wall, again_cpu) = medians(new), medians(repeat)
    return {"new_schema_added_ms_wall": new_wall, "new_schema_added_ms_cpu": new_cpu,
            "new_schema_added_ms_max_wall": max(n[0] for n in new),
            "repeat_added_ms_wall": again_wall, "repeat_added_ms_cpu": again_cpu}


def parts(engine: LLMEngine) -> dict[str, float]:
    """Compile, cached matcher and one batch-8 mask, in milliseconds (medians)."""
    compiler = GrammarCompiler(engine.tokenizer)
    compile_ms, cached_ms = [], []
    for _, _, schema in SCHEMA_SUITE:
        spec = json_schema_grammar(schema, PARAM)
        start = time.perf_counter()
        compiler.matcher(spec)
        compile_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        compiler.matcher(spec)
        cached_ms.append((time.perf_counter() - start) * 1e3)
    grammars = [compiler.matcher(json_schema_grammar(schema, PARAM))
                for _, _, schema in SCHEMA_SUITE[:BATCH]]
    logits = torch.zeros(BATCH, engine.model_config.vocab_size)
    mask_ms = []
    for _ in range(50):
        start = time.perf_counter()
        apply_grammar_masks(logits, grammars)
        mask_ms.append((time.perf_counter() - start) * 1e3)
    return {"compile_ms_median": statistics.median(compile_ms),
            "compile_ms_max": max(compile_ms),
            "cached_matcher_ms": statistics.median(cached_ms),
            "batch8_mask_ms": statistics.median(mask_ms)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.structured_bench",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    p.add_argument("--tokens", type=int, default=64, help="tokens per decode run")
    p.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = p.parse_args(argv)
    engine = LLMEngine(EngineConfig(num_kv_blocks=2048, max_num_seqs=16))
    engine.grammars.vocabulary.result()  # built at engine start; not part of any figure
    decode_steps(engine, True, 8)  # warm both paths
    decode_steps(engine, False, 8)
    walls, cpus, fastest = [], [], []
    for round_ in range(args.rounds):  # which goes first alternates too
        if round_ % 2:
            masked_steps = decode_steps(engine, True, args.tokens)
            plain_steps = decode_steps(engine, False, args.tokens)
        else:
            plain_steps = decode_steps(engine, False, args.tokens)
            masked_steps = decode_steps(engine, True, args.tokens)
        plain, masked = medians(plain_steps), medians(masked_steps)
        walls.append(masked[0] / plain[0])
        cpus.append(masked[1] / plain[1])
        # the fastest step of each: the one others' work on the machine disturbed least
        fastest.append(min(w for w, _ in masked_steps) / min(w for w, _ in plain_steps))
        print(f"decode step at batch {BATCH} (median; fastest): plain {plain[0] * 1e3:.2f} ms; "
              f"{min(w for w, _ in plain_steps) * 1e3:.2f} ms, masked {masked[0] * 1e3:.2f} ms; "
              f"{min(w for w, _ in masked_steps) * 1e3:.2f} ms: {walls[-1]:.3f}x "
              f"({cpus[-1]:.3f}x cpu); {fastest[-1]:.3f}x", flush=True)
    result = {"decode_ratio_wall_median": statistics.median(walls),
              "decode_ratio_wall_min": min(walls), "decode_ratio_wall_max": max(walls),
              "decode_ratio_cpu_median": statistics.median(cpus),
              "decode_ratio_cpu_min": min(cpus), "decode_ratio_cpu_max": max(cpus),
              "decode_ratio_fastest_median": statistics.median(fastest),
              "decode_ratio_fastest_min": min(fastest), "decode_ratio_fastest_max": max(fastest),
              **added_work(engine, max(1, args.rounds // 2)), **parts(engine)}
    for key, value in result.items():
        print(f"{key}: {value:.3f}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
