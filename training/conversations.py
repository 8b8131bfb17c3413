"""Labelled conversation pairs from the written conversation families
(training/data/conversations/families.jsonl), for `context: semantic`.

A family is one conversation ending with a user turn, four conversations whose final answer
is the same (`reworded`, `chatter`, `irrelevant_history` where the final question names all
it needs, `typo_casual`) and four that look alike but need another (`context_swap`,
`detail_swap`, `intent_flip`, `question_change`, `added_constraint`). Each side becomes the
text the guard reads (`keys.verify_text` in `semantic` mode), so training and serving see
conversations alike. None is derived from an evaluation set.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from cache.keys import CacheRequest, verify_text
from training import generate

FILE = Path(__file__).with_name("data") / "conversations" / "families.jsonl"


def text(messages: list[dict]) -> str:
    """The guard's text of a conversation (the question, then earlier turns newest first)."""
    found = verify_text(CacheRequest(route="train", model="train", messages=messages), "semantic")
    if found is None:
        raise ValueError("a conversation must end with a user turn")
    return found


def pair(a: str, b: str, same: bool, category: str, group: str) -> dict:
    return {**generate.pair(a, b, same, category, group), "source": "conversation"}


def family_pairs(row: dict, rnd: random.Random) -> list[dict]:
    """The anchor with every other conversation, two same-answer siblings with each other,
    and each near miss with one sibling (about 14 pairs)."""
    group = f"conversation.{row['family']}"
    anchor = text(row["conversation"])
    same = [(s["kind"], text(s["conversation"])) for s in row["same"]]
    different = [(d["kind"], text(d["conversation"])) for d in row["different"]]
    out = [pair(anchor, t, True, k, group) for k, t in same]
    out += [pair(anchor, t, False, k, group) for k, t in different]
    for (k1, t1), (_, t2) in rnd.sample([(x, y) for i, x in enumerate(same) for y in same[i + 1:]], 2):
        out.append(pair(t1, t2, True, k1, group))
    out += [pair(rnd.choice(same)[1], t, False, k, group) for k, t in different]
    return out


def pairs(seed: int = 13, path: Path = FILE) -> list[dict]:
    """Every family's pairs, reproducibly, with ids `conv-NNNNN`."""
    if not path.exists():
        return []
    rnd = random.Random(seed)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return generate.numbered([p for row in rows for p in family_pairs(row, rnd)], "conv")
