"""`headstart eval-cache --pairs FILE [--config FILE] [--route NAME] [--json]`

Measures a route's semantic cache, as configured (threshold, guard, context rule), on
labelled pairs in fow-cache's JSONL format: the true-hit rate (same-answer pairs served)
and the false-hit rate (different-answer pairs served), per category, with 95% Wilson
intervals; then both rates at the verifier's cross-validated operating points and the
route's own. `--pairs` may name a
folder (every *.jsonl under it) and may be given several times. With `--json` the last line
printed is `{"pairs": N, "true_hit_rate": x, "false_hit_rate": y, "by_category": {...}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import replace

from cache.eval import default_points, evaluate, format_table, load_pairs
from gateway.cache_stage import settings_for
from gateway.config import ConfigError, load_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="headstart eval-cache", description=__doc__.split("\n")[0])
    p.add_argument("--pairs", action="append", required=True,
                   help="labelled pairs (.jsonl file or a folder of them); repeatable")
    p.add_argument("--config", help="gateway config (default: the embedded one)")
    p.add_argument("--route", help="route whose cache policy to use (default: the first "
                   "route with the semantic cache on, else the first route)")
    p.add_argument("--split", choices=["all", "held_out", "train"], default="all",
                   help="fixed split by id hash (30%% held out from tuning)")
    p.add_argument("--threshold", type=float, help="override the route's cosine floor")
    p.add_argument("--context", choices=["full", "system", "none", "semantic"],
                   help="override the route's context rule (`semantic` for conversation pairs)")
    p.add_argument("--verifier-threshold", type=float,
                   help="override the route's verifier threshold (default: the shipped one)")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"headstart eval-cache: {e}", file=sys.stderr)
        return 2
    if args.route:
        route = config.route(args.route)
        if route is None:
            known = ", ".join(r.name for r in config.routes)
            print(f"headstart eval-cache: unknown route {args.route!r} (known: {known})",
                  file=sys.stderr)
            return 2
    else:
        route = next((r for r in config.routes if r.cache.semantic.enabled), config.routes[0])
    settings = settings_for(route)
    if not settings.semantic_enabled:
        print(f"note: route {route.name!r} has the semantic cache off; evaluating it with "
              f"its semantic policy as if enabled", file=sys.stderr)
    if args.threshold is not None:
        settings = replace(settings, threshold=args.threshold)
    if args.verifier_threshold is not None:
        settings = replace(settings, verifier_threshold=args.verifier_threshold)
    if args.context is not None:
        settings = replace(settings, context=args.context)
    pairs = []
    for path in args.pairs:
        if not os.path.exists(path):
            print(f"headstart eval-cache: no such file: {path}", file=sys.stderr)
            return 2
        pairs += load_pairs(path, args.split)
    if not pairs:
        print("headstart eval-cache: no pairs to evaluate", file=sys.stderr)
        return 2
    points = default_points(settings.context) if settings.guard else {}
    report = asyncio.run(evaluate(pairs, settings, points=points))
    title = (f"semantic cache of route {route.name!r}: cosine floor {settings.floor}, "
             f"guard {'on' if settings.guard else 'off'}, verifier threshold "
             f"{settings.verifier_threshold or 'shipped'}, context {settings.context}, "
             f"split {args.split}")
    print(format_table(report, title))
    if args.json:
        print(json.dumps(report.summary()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
