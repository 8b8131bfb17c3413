"""Labelled pairs from the written question families (training/data/families/*.jsonl).

A family is one question, six rewordings a cached answer to it fully answers (most worded
differently throughout, a few near repeats) and seven near misses that look almost the same
but need another answer, each tagged with what changed (`attribute`, `swapped`, `lookalike`,
`constraint`, `negation`, ...). They were written question by question for training, across
support, software, science, humanities, money and law, everyday life and product FAQs; none
is derived from an evaluation set.

    {"family": "sup-0001", "domain": "...", "question": "...", "same": [...],
     "different": [{"q": "...", "kind": "attribute"}, ...]}

Pairs: every two wordings of the question, every near miss with the question and with two
rewordings (a near miss stays one whatever the wording), and a near miss with a typo (a
mistyped trap is still a trap). Every pair's `group` is its family,
so cross-validation folds never split one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from training import perturb
from training.generate import numbered, pair

FOLDER = Path(__file__).with_name("data") / "families"
KINDS = frozenset({"attribute", "question_word", "swapped", "negation", "numbers", "lookalike",
                   "constraint", "entity_swap", "related", "scope", "time"})


@dataclass(frozen=True)
class Family:
    """One question, its rewordings and its near misses (kind, text)."""

    name: str
    question: str
    same: tuple[str, ...]
    different: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, row: dict) -> Family:
        different = tuple((d["kind"], d["q"]) for d in row["different"])
        unknown = {k for k, _ in different} - KINDS
        if unknown:
            raise ValueError(f"family {row['family']}: unknown kinds {sorted(unknown)}")
        return cls(row["family"], row["question"], tuple(row["same"]), different)


def load(folder: Path = FOLDER) -> list[Family]:
    """Every family under `folder`, in file order."""
    return [Family.parse(json.loads(line)) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def family_pairs(family: Family, rnd: random.Random, forms_per_miss: int = 3) -> Iterator[dict]:
    """The labelled pairs one family gives (about 43): every two of its wordings (the
    question and its rewordings: the scarce, hard class), each near miss with
    `forms_per_miss` of them, and one near miss against a mistyped wording."""
    group = f"family.{family.name}"
    forms = [family.question, *family.same]
    for i, a in enumerate(forms):
        for b in forms[i + 1:]:
            yield pair(a, b, True, "reworded", group)
    for kind, q in family.different:
        for form in [family.question, *rnd.sample(family.same, forms_per_miss - 1)]:
            yield pair(form, q, False, kind, group)
    kind, q = rnd.choice(family.different)
    yield pair(perturb.with_typos(rnd.choice(forms), rnd), q, False, kind, group)


def pairs(seed: int = 11, folder: Path = FOLDER) -> list[dict]:
    """All families' pairs, reproducibly ordered, with ids `fam-NNNNN`."""
    rnd = random.Random(seed)
    return numbered([p for family in load(folder) for p in family_pairs(family, rnd)], "fam")
