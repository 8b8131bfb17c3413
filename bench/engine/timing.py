"""What every engine of bench/engine/engine_bench.py shares: fresh prompts and the decode rate."""

from __future__ import annotations

import random

TOKEN_RANGE = (200, 40000)  # ordinary vocabulary, no special tokens


def random_prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


def decode_rate(times: list[list[float]]) -> float:
    """Aggregate tokens/s once every sequence has its first token: tokens stamped after the
    last first-token time, over the time from then to the last token."""
    start = max(t[0] for t in times)
    end = max(t[-1] for t in times)
    after = sum(1 for seq in times for t in seq if t > start)
    return after / (end - start) if end > start else float("nan")
