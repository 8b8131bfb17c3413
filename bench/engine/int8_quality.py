"""The answers' quality on the int8 path against float32 and bf16, on a fixed text and prompts.

    python -m bench.engine.int8_quality [--tokens 3103] [--window 512]

Perplexity of tests/data/english_text.txt (passages of public-domain English, ~3,100
tokens) in windows of `--window` tokens, each run as one cold prompt through the engine's
model; and greedy agreement with bf16 on `PROMPTS` (chat-formatted), two ways:
- per token: bf16 answers each prompt greedily (32 tokens); both paths then read prompt +
  that answer in one pass, and at each of the 32 positions we count whether they pick the
  same next token (the share of identical greedy decisions);
- free-running: each path answers on its own; the share of the 32 tokens before the two
  answers first differ (one early difference sends the rest elsewhere; float32 against
  bf16 is the yardstick).
The engine bench reports these figures; tests/engine/test_int8.py checks them on
a slice. Then the decode path: the first 3 x 384 tokens read one token a step (every logit
from a decode step, the packed Q4/Q8 copies), against float32 reading the same windows whole.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.attention import AttentionMetadata
from engine.model import LlamaModel
from engine.weights import load_model

TEXT = Path(__file__).resolve().parents[2] / "tests" / "data" / "english_text.txt"
PROMPTS = (
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Explain in one paragraph why the sky is blue.",
    "List three uses of copper and say why it is chosen for each.",
    "Once upon a time, in a small village by the mountains, there lived",
    "Translate to French: The weather is nice today and I would like to go for a walk.",
    "What are the main causes of the French Revolution?",
)
GREEDY_TOKENS = 32


def text_ids(tokenizer, limit: int | None = None) -> list[int]:
    ids = tokenizer.encode(TEXT.read_text())
    return ids[:limit] if limit else ids


def _forward(model: LlamaModel, ids: list[int], kv: torch.Tensor, start: int,
             table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Logits of tokens `ids` at positions start.. of one sequence whose blocks are `table`."""
    pos = torch.arange(start, start + len(ids))
    meta = AttentionMetadata(table[pos // block_size] * block_size + pos % block_size,
                             [0, len(ids)], [start + len(ids)], table[None])
    with torch.inference_mode():
        return model.compute_logits(model(torch.tensor(ids), pos, meta, kv))


def _cache(model: LlamaModel, tokens: int, block_size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    c = model.config
    blocks = -(-tokens // block_size)
    kv = torch.zeros(c.num_layers, 2, blocks + 1, block_size, c.num_kv_heads, c.head_dim,
                     dtype=model.dtype)
    return kv, torch.arange(1, blocks + 1)


def perplexity(model: LlamaModel, ids: list[int], window: int = 512) -> float:
    """exp(mean negative log-likelihood) of `ids`, in independent windows of `window`."""
    nll, count = 0.0, 0
    for lo in range(0, len(ids) - 1, window):
        chunk = ids[lo:lo + window + 1]
        if len(chunk) < 2:
            break
        kv, table = _cache(model, len(chunk))
        logits = _forward(model, chunk[:-1], kv, 0, table, 16)
        nll += F.cross_entropy(logits, torch.tensor(chunk[1:]), reduction="sum").item()
        count += len(chunk) - 1
    return math.exp(nll / count)


DECODE_WINDOW, DECODE_WINDOWS = 384, 3  # tokens read one a step: 3 x 384


def decode_perplexity(model: LlamaModel, ids: list[int], window: int = DECODE_WINDOW,
                      windows: int = DECODE_WINDOWS) -> float:
    """Perplexity of the first `windows` windows of `ids` read one token a step: every
    logit comes from a decode step (the packed decode copies), teacher-forced."""
    nll, count = 0.0, 0
    for w in range(windows):
        chunk = ids[w * window:(w + 1) * window + 1]
        kv, table = _cache(model, len(chunk))
        for i in range(len(chunk) - 1):
            logits = _forward(model, chunk[i:i + 1], kv, i, table, 16)
            nll += F.cross_entropy(logits.float(), torch.tensor(chunk[i + 1:i + 2])).item()
            count += 1
    return math.exp(nll / count)


def greedy(model: LlamaModel, prompt: list[int], tokens: int = GREEDY_TOKENS) -> list[int]:
    """The first `tokens` greedy tokens after `prompt` (prefill, then one token a step)."""
    kv, table = _cache(model, len(prompt) + tokens)
    logits = _forward(model, prompt, kv, 0, table, 16)
    out = [int(logits[-1].argmax())]
    while len(out) < tokens:
        logits = _forward(model, out[-1:], kv, len(prompt) + len(out) - 1, table, 16)
        out.append(int(logits[-1].argmax()))
    return out


def shared_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def greedy_agreement(model: LlamaModel, reference: LlamaModel, prompts: list[list[int]],
                     tokens: int = GREEDY_TOKENS) -> list[float]:
    """Per prompt: the share of the first `tokens` tokens that `model` generates exactly as
    `reference` does, counted up to the first difference."""
    return [shared_prefix(greedy(model, p, tokens), greedy(reference, p, tokens)) / tokens
            for p in prompts]


def decisions(model: LlamaModel, prompt: list[int], answer: list[int]) -> list[int]:
    """The greedy pick at each answer position, reading prompt + answer in one pass."""
    ids = prompt + answer[:-1]
    kv, table = _cache(model, len(ids))
    logits = _forward(model, ids, kv, 0, table, 16)
    return logits[len(prompt) - 1:].argmax(-1).tolist()


def token_agreement(model: LlamaModel, reference: LlamaModel, prompts: list[list[int]],
                    tokens: int = GREEDY_TOKENS) -> list[float]:
    """Per prompt: the share of the reference's first `tokens` greedy positions at which
    `model` and the reference pick the same next token, both reading the same text."""
    shares = []
    for p in prompts:
        answer = greedy(reference, p, tokens)
        ours, theirs = decisions(model, p, answer), decisions(reference, p, answer)
        shares.append(sum(a == b for a, b in zip(ours, theirs, strict=True)) / tokens)
    return shares


def chat_prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": p}]))
            for p in PROMPTS]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine.int8_quality", description=__doc__)
    p.add_argument("--tokens", type=int, help="first tokens of the text (default: all)")
    p.add_argument("--window", type=int, default=512)
    args = p.parse_args(argv)
    fp32, tok, _ = load_model(dtype="float32")
    bf16, _, _ = load_model(dtype="bfloat16", int8=False)
    int8, _, _ = load_model(dtype="bfloat16", int8=True)
    ids = text_ids(tok, args.tokens)
    ref = perplexity(fp32, ids, args.window)
    print(f"text: {len(ids)} tokens, windows of {args.window}")
    print("| path | perplexity | vs float32 |\n|---|---|---|")
    for name, model in (("float32", fp32), ("bf16", bf16), ("int8 matmuls", int8)):
        ppl = perplexity(model, ids, args.window)
        print(f"| {name} | {ppl:.3f} | {ppl / ref - 1:+.2%} |", flush=True)
    ref = perplexity(fp32, ids[:DECODE_WINDOWS * DECODE_WINDOW + 1], DECODE_WINDOW)
    ppl = decode_perplexity(bf16, ids)
    print(f"decode steps (one token a step, {DECODE_WINDOWS} x {DECODE_WINDOW} tokens): "
          f"{ppl:.3f}, {ppl / ref - 1:+.2%} vs float32 read in windows of {DECODE_WINDOW}",
          flush=True)
    prompts = chat_prompts(tok)
    for label, shares in (("int8, per token", token_agreement(int8, bf16, prompts)),
                          ("int8, free-running", greedy_agreement(int8, bf16, prompts)),
                          ("float32, free-running", greedy_agreement(fp32, bf16, prompts))):
        print(f"agreement with bf16, first {GREEDY_TOKENS} tokens, {label}: "
              f"{mean(shares):.1%} ({', '.join(f'{s:.0%}' for s in shares)})", flush=True)
    return 0


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


if __name__ == "__main__":
    raise SystemExit(main())
