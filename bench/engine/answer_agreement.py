"""Whole greedy answers, free-running, on a fixed set of simple questions: does each CPU path
answer as transformers does, and does its answer hold the known fact?

    python -m bench.engine.answer_agreement [--set heldout|training] [--tokens 32]
        [--paths default,avx512,fallback,float32] [--json FILE] [--reuse FILE] [--show]

Perplexity and per-token agreement (bench/engine/int8_quality.py) read a reference text; an
answer is the model reading its own continuation, where one early difference sends the rest
elsewhere. Each question of `bench/engine/data/questions.json` is put through the chat
template once (the engine's tokenizer: every path reads the same prompt ids) and answered
greedily for at most `--tokens` new tokens or until EOS:
- transformers (`AutoModelForCausalLM` on the same GGUF, dequantised), bf16 and float32: the
  references;
- the engine's paths, each in a child process with its environment, through `LLMEngine`
  (one cold request at a time, no prefix cache): `default` (what this CPU runs), `avx512`
  (AMX masked, the variant CPUs without AMX run; built beside the AMX build as
  `cpu_kernels.lower_path` does), `amx`, `fallback` (HEADSTART_KERNELS=0: torch's own
  kernels), `float32` (the engine in float32).
For each path: how many whole answers equal transformers' token for token, and how many
contain one of the question's known answers. `heldout` is the set figures are reported on;
`training` is the one anything tuned is tuned on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

QUESTIONS = Path(__file__).parent / "data" / "questions.json"
REFERENCES = ("transformers-bf16", "transformers-fp32")
ENGINE_PATHS = ("default", "avx512", "amx", "fallback", "float32")
DEFAULT_PATHS = ("default", "fallback")


def questions(name: str = "heldout") -> list[dict]:
    """The question set `name`: [{"q": question, "answers": [accepted strings]}]."""
    return json.loads(QUESTIONS.read_text())[name]


def prompt_ids(tokenizer, question: str) -> list[int]:
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": question}]))


def contains_answer(text: str, answers: list[str]) -> bool:
    return any(a.lower() in text.lower() for a in answers)


def engine_answers(prompts: list[list[int]], tokens: int, dtype: str = "auto") -> list[list[int]]:
    """Greedy answers through the engine as it runs in this process (its kernel path)."""
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(dtype=dtype, kv_cache_memory_mb=64,
                                    enable_prefix_caching=False))
    params = SamplingParams(max_tokens=tokens, temperature=0.0)
    eos = set(engine.eos_token_ids)
    return [[t for t in engine.generate([p], params)[0].token_ids if t not in eos]
            for p in prompts]


def transformers_answers(prompts: list[list[int]], tokens: int, dtype: str,
                         eos: list[int]) -> list[list[int]]:
    """Greedy answers of transformers on the same GGUF, dequantised, in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM, GgufConfig

    from engine.weights import default_model_path

    path = Path(default_model_path())
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype),
        quantization_config=GgufConfig(dequantize=True)).eval()
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = model.generate(torch.tensor([p]), max_new_tokens=tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=eos[0])[0, len(p):].tolist()
            out.append([t for t in ids if t not in eos])
    return out


def path_env(path: str) -> dict[str, str]:
    """The environment a child process runs `path` under."""
    if path == "fallback":
        return {"HEADSTART_KERNELS": "0"}
    if path == "avx512":
        from cpu_kernels import build
        from cpu_kernels.lower_path import lower_path_env

        return lower_path_env("amx", str(build.build_dir())) or {}
    if path == "amx":
        return {"HEADSTART_KERNELS": "1"}
    return {}


def answer_in_child(path: str, set_name: str, tokens: int) -> dict:
    """{"path": what the engine logged it runs, "answers": token ids} from a child process."""
    env = {**os.environ, **path_env(path)}
    if path == "avx512":  # built (and tried) once, as cpu_kernels.lower_path does
        subprocess.run([sys.executable, "-m", "cpu_kernels.build"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    child = subprocess.run([sys.executable, "-m", "bench.engine.answer_agreement", "--answer",
                            path, "--set", set_name, "--tokens", str(tokens)],
                           env=env, capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def answer_here(path: str, set_name: str, tokens: int) -> dict:
    """Answers of one path in this process (the child's side of `answer_in_child`)."""
    from cpu_kernels import kernel_path
    from engine.weights import load_tokenizer

    tokenizer = load_tokenizer()
    prompts = [prompt_ids(tokenizer, item["q"]) for item in questions(set_name)]
    if path in REFERENCES:
        ids = transformers_answers(prompts, tokens, "bfloat16" if path.endswith("bf16")
                                   else "float32", list(tokenizer.eos_token_ids))
        return {"path": path, "answers": ids}
    ids = engine_answers(prompts, tokens, "float32" if path == "float32" else "auto")
    return {"path": "float32" if path == "float32" else kernel_path(), "answers": ids}


def report(set_name: str, results: dict[str, dict], show: bool = False) -> list[str]:
    """Markdown: per path, answers equal to each reference's and answers that hold the fact."""
    from engine.weights import load_tokenizer

    tokenizer = load_tokenizer()
    items = questions(set_name)
    refs = [r for r in REFERENCES if r in results]
    lines = [f"{len(items)} questions ({set_name}), greedy, whole answers",
             "| path | runs | " + " | ".join(f"= {r}" for r in refs) + " | holds the answer |",
             "|---" * (3 + len(refs)) + "|"]
    for name, result in results.items():
        answers = result["answers"]
        same = [sum(a == b for a, b in zip(answers, results[r]["answers"], strict=True))
                for r in refs]
        right = sum(contains_answer(tokenizer.decode(a), item["answers"])
                    for a, item in zip(answers, items, strict=True))
        lines.append(f"| {name} | {result['path']} | " + " | ".join(f"{s}/{len(items)}"
                                                                      for s in same)
                     + f" | {right}/{len(items)} |")
    if show:
        for i, item in enumerate(items):
            lines.append(f"\n{item['q']}")
            for name, result in results.items():
                lines.append(f"  {name:18s} {tokenizer.decode(result['answers'][i])!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.answer_agreement",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="heldout", choices=("heldout", "training"))
    p.add_argument("--tokens", type=int, default=32, help="new tokens at most per answer")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help=f"engine paths, of {', '.join(ENGINE_PATHS)}")
    p.add_argument("--references", default=",".join(REFERENCES))
    p.add_argument("--json", help="write every answer's token ids here")
    p.add_argument("--reuse", help="take the answers of paths already in this --json file "
                                   "(same set and tokens) instead of running them again")
    p.add_argument("--show", action="store_true", help="print every answer")
    p.add_argument("--answer", help=argparse.SUPPRESS)  # a child: one path's answers as JSON
    args = p.parse_args(argv)
    if args.answer:
        print(json.dumps(answer_here(args.answer, args.set, args.tokens)))
        return 0
    names = [r for r in args.references.split(",") if r] + [n for n in args.paths.split(",") if n]
    unknown = [n for n in names if n not in REFERENCES + ENGINE_PATHS]
    if unknown:
        p.error(f"unknown path(s): {', '.join(unknown)}")
    kept = {}
    if args.reuse:
        saved = json.loads(Path(args.reuse).read_text())
        if (saved["set"], saved["tokens"]) == (args.set, args.tokens):
            kept = saved["results"]
    results = {}
    for name in names:
        results[name] = kept.get(name) or answer_in_child(name, args.set, args.tokens)
        print(f"[{name}] answered ({results[name]['path']})", file=sys.stderr, flush=True)
        if args.json:  # after each path, so that --reuse can pick up an interrupted run
            Path(args.json).write_text(json.dumps({"set": args.set, "tokens": args.tokens,
                                                   "results": results}))
    print("\n".join(report(args.set, results, args.show)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
