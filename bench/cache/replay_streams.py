"""The replay's traffic: question families asked in several wordings over time, from two
sources kept apart.

- `families`: the verifier's own training families (training/data/families/*.jsonl). A
  family is one meaning asked in seven wordings (the question and its six rewordings) and
  seven near misses, each a meaning of its own. The verifier was trained on these pairs, so
  it reads them better than it reads traffic it never saw: this stream shows what the
  mechanism does with many wordings per meaning, not how well the verifier generalises.
- `heldout`: the two hand-written held-out sets (cache/data/heldout_pairs*.jsonl), which no
  training step reads. Each pair is one meaning (a same-answer pair) or two (a near miss):
  its `a`, its `b`, and a near repeat of each (a filler, a typo, a synonym or a moved clause:
  training/perturb.py, which keep the answer). The sets label a pair's two questions only,
  and two pairs may ask one thing in other words ("How do I reset my password?" / "How can
  I reset my password?" are two pairs' `a`): each pair is asked in a namespace of its own,
  so only labelled pairs meet, while the route's budget pools them all. Few wordings per
  meaning: what a judge can add here is small by construction.
- `fow`: fow-cache's 600 labelled pairs (the `fow-cache` package, CC BY 4.0), asked as
  `heldout` asks its pairs: a public set that none of the exact checks was written against.

Every asking is a distinct text (an exact repeat would be an exact-cache hit for every arm
alike); the order is drawn once per seed, a meaning's first wording first for `heldout`
(`a` is the pair's cached side).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from training import families, perturb

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = (ROOT / "cache" / "data" / "heldout_pairs.jsonl",
           ROOT / "cache" / "data" / "heldout_pairs_2.jsonl")


@dataclass(frozen=True)
class Asking:
    """One request of the replay: its text, and the meaning whose answer serves it."""

    text: str
    meaning: str
    kind: str  # "question", "reworded", "near_repeat", or the near miss's kind
    namespace: str | None = None  # heldout: the pair's own


def family_stream(count: int = 200, seed: int = 7) -> list[Asking]:
    """`count` training families, every wording and near miss once, in a random order."""
    rnd = random.Random(seed)
    chosen = rnd.sample(families.load(), count)
    askings = []
    for family in chosen:
        askings.append(Asking(family.question, family.name, "question"))
        askings += [Asking(text, family.name, "reworded") for text in family.same]
        askings += [Asking(text, f"{family.name}~{i}", kind)
                    for i, (kind, text) in enumerate(family.different)]
    return _distinct(_shuffled(askings, rnd))


def heldout_stream(seed: int = 7, paths: tuple[Path, ...] = HELDOUT) -> list[Asking]:
    """Every held-out pair: `a` first, then `b` and a near repeat of each, spread over the
    stream at random times."""
    rnd = random.Random(seed)
    timed: list[tuple[float, Asking]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            pair = json.loads(line)
            a = f"{pair['id']}:a"
            b = a if pair["same_answer"] else f"{pair['id']}:b"
            kind = str(pair["category"])
            ns = str(pair["id"])
            later = [Asking(pair["b"], b, kind, ns),
                     Asking(near_repeat(pair["a"], rnd), a, "near_repeat", ns),
                     Asking(near_repeat(pair["b"], rnd), b, "near_repeat", ns)]
            times = sorted(rnd.random() for _ in range(4))
            rnd.shuffle(later)
            timed += zip(times, [Asking(pair["a"], a, "question", ns), *later], strict=True)
    timed.sort(key=lambda t: t[0])
    return _distinct([asking for _, asking in timed])


def fow_stream(seed: int = 7) -> list[Asking]:
    """fow-cache's labelled pairs, asked as `heldout_stream` asks the held-out sets."""
    from cache.eval import default_pairs

    return heldout_stream(seed, (default_pairs(),))


def near_repeat(text: str, rnd: random.Random) -> str:
    """The text with its answer kept: a filler, a typo, a synonym or a moved clause."""
    made = [perturb.with_synonym(text, rnd), perturb.reordered(text)]
    made += [perturb.with_filler(text, rnd), perturb.with_typos(text, rnd)]
    return rnd.choice([m for m in made if m and m != text] or [text + " thanks"])


def same_answer_askings(stream: list[Asking]) -> list[bool]:
    """Per asking: whether a wording of its meaning was asked before (so a hit can be
    right)."""
    seen: set[str] = set()
    out = []
    for asking in stream:
        out.append(asking.meaning in seen)
        seen.add(asking.meaning)
    return out


def _shuffled(askings: list[Asking], rnd: random.Random) -> list[Asking]:
    out = list(askings)
    rnd.shuffle(out)
    return out


def _distinct(askings: list[Asking]) -> list[Asking]:
    """The first asking of each text (in its namespace): a text two meanings share keeps
    the first."""
    seen: set[tuple[str, str | None]] = set()
    out = []
    for asking in askings:
        if (asking.text, asking.namespace) not in seen:
            seen.add((asking.text, asking.namespace))
            out.append(asking)
    return out
