"""The replay benchmark: question families asked in several wordings over time, through the
semantic cache with each judge, hit rate and wrong-hit rate against the number of requests.

    python -m bench.cache.replay [--streams families,heldout[,fow]] [--families 200]
                                 [--judges none,agreement,upstream,oracle] [--seed 7]
                                 [--out bench/results/replay] [--answers FILE]

Each arm replays the same stream (bench/cache/replay_streams.py) into a fresh in-memory
cache with the route's defaults (exact and semantic on, the shipped verifier, floor
`judge.floor` 0.2, `max_false_hit_rate` 0.01; the adaptive skip off, so every request is
looked up). A miss stores the upstream's answer tagged with its meaning; a hit is right when
the answer it served carries the asking's meaning. A grey-zone miss is judged right after
its answer is stored (a judge that keeps up with the traffic: the gateway's queue judges the
same pairs later, at the route's rate) through cache/judging.py, as the gateway does:
- `none`: no judge (the cache as it was);
- `agreement`: the entry's answer against the fresh one; the answers are the bundled
  model's (bench/cache/replay_model.py), generated once;
- `upstream`: the bundled model asked in one word (`gateway.judges.UpstreamJudge`): weak;
- `oracle`: a judge that reads the stream's labels. It shows the mechanism's ceiling (what
  promotion and the budget do with a judge that is never wrong), not a result.
Writes `replay.json`, `replay.md` and a PNG per stream (bench/cache/replay_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cache.replay_model import BundledModel
from bench.cache.replay_report import Step, write_report
from bench.cache.replay_streams import (
    Asking,
    family_stream,
    fow_stream,
    heldout_stream,
    same_answer_askings,
)
from cache.agreement import AgreementJudge
from cache.embedder import Embedder
from cache.grey import GreyPair
from cache.judgement import Judge, Judgement
from cache.judging import judge_pair
from cache.keys import CacheRequest, query_text
from cache.response_cache import ResponseCache
from cache.settings import CacheSettings
from cache.stores.base import CacheEntry
from cache.stores.memory import MemoryStore

ROUTE = "replay"


class OracleJudge:
    """Says "yes" exactly when the new question's meaning is the entry's (the labels)."""

    name = "oracle"

    def __init__(self, stream: list[Asking]) -> None:
        self.meanings = {(a.namespace, a.text): a.meaning for a in stream}

    async def __call__(self, pair: GreyPair, entry: CacheEntry) -> Judgement:
        asked = (pair.req.namespace, query_text(pair.req) or "")
        same = self.meanings.get(asked) == entry.answer.get("meaning")
        return Judgement(same, self.name, "labelled")


@dataclass
class Arm:
    name: str
    judge: Judge | None


def request(asking: Asking) -> CacheRequest:
    return CacheRequest(route=ROUTE, model="replay", namespace=asking.namespace,
                        messages=[{"role": "user", "content": asking.text}],
                        params={"temperature": 0})


async def run_arm(stream: list[Asking], arm: Arm, answers: dict[str, str],
                  labels: Path | None = None) -> list[Step]:
    """Replay `stream` through a fresh cache with `arm`'s judge; one `Step` per asking."""
    settings = CacheSettings(route=ROUTE, exact_enabled=True, semantic_enabled=True,
                             adaptive_skip=False, judge=arm.judge and arm.judge.name,
                             labels=str(labels) if labels else None)
    if labels is not None and labels.exists():
        labels.unlink()  # this run's judgements only
    cache = ResponseCache(MemoryStore(), embedder=Embedder.shared())
    steps = []
    for asking, known in zip(stream, same_answer_askings(stream), strict=True):
        req = request(asking)
        found = await cache.lookup(req, settings)
        if found.answer is not None:
            steps.append(Step(known, True, found.answer.get("meaning") == asking.meaning,
                              found.status))
            continue
        answer = {"content": answers.get(asking.text) or asking.text, "meaning": asking.meaning,
                  "finish_reason": "stop"}
        await cache.store(req, answer, settings, vector=found.vector)
        judged = None
        if found.grey is not None and arm.judge is not None:
            pair = GreyPair(req, settings, found.grey, answer, found.vector)
            judged = (await judge_pair(cache, pair, arm.judge)).status
        steps.append(Step(known, False, False, found.status, judged))
    await cache.close()
    return steps


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="families,heldout")
    ap.add_argument("--families", type=int, default=200)
    ap.add_argument("--judges", default="none,agreement,upstream,oracle")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="bench/results/replay")
    ap.add_argument("--answers", default=None, help="the model's answers (JSON); default "
                    "OUT/answers.json, generated where missing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    judges = args.judges.split(",")
    streams = {"families": lambda: family_stream(args.families, args.seed),
               "heldout": lambda: heldout_stream(args.seed),
               "fow": lambda: fow_stream(args.seed)}
    chosen = {name: streams[name]() for name in args.streams.split(",")}
    model = None
    answers: dict[str, str] = {}
    if {"agreement", "upstream"} & set(judges):
        model = await BundledModel().open()
        texts = [a.text for stream in chosen.values() for a in stream]
        answers = await model.answers(texts, Path(args.answers or out / "answers.json"))
    results: dict[str, dict[str, list[Step]]] = {}
    seconds: dict[str, dict[str, float]] = {}
    try:
        for name, stream in chosen.items():
            arms = {"none": None, "oracle": OracleJudge(stream),
                    "agreement": AgreementJudge(Embedder.shared()),
                    "upstream": model.judge() if model is not None else None}
            for judge in judges:
                t0 = time.perf_counter()
                results.setdefault(name, {})[judge] = await run_arm(
                    stream, Arm(judge, arms[judge]), answers,
                    out / f"labels-{name}-{judge}.jsonl" if judge != "none" else None)
                seconds.setdefault(name, {})[judge] = round(time.perf_counter() - t0, 1)
                print(f"{name} {judge}: {seconds[name][judge]} s", flush=True)
    finally:
        if model is not None:
            await model.close()
    print(write_report(out, results, seconds, vars(args)))


if __name__ == "__main__":
    asyncio.run(main())
