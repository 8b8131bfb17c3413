"""What every engine of bench/engine/engine_bench.py shares: fresh prompts and the decode rate."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

TOKEN_RANGE = (200, 40000)  # ordinary vocabulary, no special tokens


def random_prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


ENGLISH_TEXT = Path(__file__).resolve().parents[2] / "tests" / "data" / "english_text.txt"


@lru_cache(maxsize=1)
def _english_ids() -> tuple[int, ...]:
    from engine.weights import load_tokenizer

    return tuple(load_tokenizer().encode(ENGLISH_TEXT.read_text()))


def english_prompt(n: int, seed: int) -> list[int]:
    """`n` tokens of plain English prose (tests/data/english_text.txt, read on past its end
    from its start), from a place the seed picks: a prompt no earlier one shares a first
    block with, as long as the seeds pick different places."""
    ids = _english_ids()
    start = random.Random(seed).randrange(len(ids))
    return [ids[(start + i) % len(ids)] for i in range(n)]


PROMPTS = {"random": random_prompt, "english": english_prompt}


def decode_rate(times: list[list[float]]) -> float:
    """Aggregate tokens/s once every sequence has its first token: tokens stamped after the
    last first-token time, over the time from then to the last token."""
    start = max(t[0] for t in times)
    end = max(t[-1] for t in times)
    after = sum(1 for seq in times for t in seq if t > start)
    return after / (end - start) if end > start else float("nan")
