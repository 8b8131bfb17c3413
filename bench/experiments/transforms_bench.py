"""Prompt transforms against the bundled engine: where each one pays off, in one run.

    python -m bench.experiments.transforms_bench [--cases 4] [--turns 16] [--prune-cases 2]
                                                 [--map-reduce-cases 2] [--out FILE]

Runs the gateway's `TransformStage` in front of the in-process engine (no HTTP, so the
numbers are the transforms' and the engine's) and reports, with each transform on and off:
TTFT, total latency, prompt tokens and prefix-cache hits. Workloads: long contexts with
planted facts (compression), a replayed multi-turn chat (windowing: none / sliding /
anchored), multi-question turns (decomposition), documents over the context (map-reduce),
plus the quality set (share of facts that survive each compressor), lossless compression of
JSON exports, token-counting speed and the compression break-even.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from engine import AsyncEngine, EngineConfig, OpenAIEngine  # noqa: E402
from gateway.cache_stage import CacheStage  # noqa: E402
from gateway.config import GatewayConfig  # noqa: E402
from gateway.context import RequestContext  # noqa: E402
from gateway.metrics import GatewayMetrics  # noqa: E402
from gateway.pipeline import Pipeline  # noqa: E402
from gateway.transform_stage import TransformStage, _shared_embed  # noqa: E402
from gateway.upstream_call import UpstreamCaller  # noqa: E402
from gateway.upstreams.engine import EngineUpstream  # noqa: E402
from openai_api import ChatCompletionRequest, new_id  # noqa: E402
from prompts.compress import Compressor, CompressSettings  # noqa: E402
from prompts.lossless import compress_lossless  # noqa: E402
from prompts.quality import evaluate, make_cases  # noqa: E402

COMPRESS = {"enabled": True, "min_tokens": 500, "target_ratio": 0.3}
ROUTES = [
    {"name": "plain"},
    {"name": "compress", "compress": {**COMPRESS, "embeddings": False}},
    {"name": "compress-embed", "compress": COMPRESS},
    {"name": "window-sliding", "window": {"max_input_tokens": 1024, "anchored": False}},
    {"name": "window-anchored", "window": {"max_input_tokens": 1024, "low_water": 0.5}},
    {"name": "split", "decompose": {"enabled": True}},
    {"name": "map-reduce", "decompose": {"enabled": True, "map_reduce": True,
                                         "context_tokens": 1024, "map_max_tokens": 24}},
]
QUESTIONS = [
    "Answer each briefly:\n1. What is the capital of France?\n2. What colour is grass?\n"
    "3. How many days are in a week?\n4. What do bees make?",
    "Quick quiz:\n1. Name a planet.\n2. Name a fruit.\n3. Name a musical instrument.\n"
    "4. Name an ocean.",
    "What is the boiling point of water in Celsius? Who wrote Romeo and Juliet? "
    "What is the largest mammal on Earth?",
]


@dataclass
class Run:
    route: str
    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int
    text: str = field(repr=False)
    transforms: list[str]


class Bench:
    def __init__(self) -> None:
        self.engine = AsyncEngine(EngineConfig(kv_cache_memory_mb=768))
        self.config = GatewayConfig.from_dict({
            "upstreams": {"local": {"kind": "engine"}},
            "routes": [{"models": [r["name"]], "upstream": "local", **r} for r in ROUTES]})
        upstream = EngineUpstream(self.config.upstreams["local"], OpenAIEngine(self.engine))
        metrics = GatewayMetrics()
        caller = UpstreamCaller({"local": upstream}, metrics)
        # the gateway's own path without the caches: transforms, then the engine in-process
        self.pipeline = Pipeline(CacheStage(None, self.config),
                                 TransformStage(self.config, caller, self.engine), caller, metrics)

    async def ask(self, route: str, messages: list[dict], max_tokens: int = 16) -> Run:
        body = ChatCompletionRequest(model=route, messages=messages, max_tokens=max_tokens,
                                     temperature=0.0, stream=True)
        ctx = RequestContext(request_id=new_id("bench"), kind="chat", body=body,
                             route=self.config.route(route))
        t0, first, parts, usage = time.perf_counter(), None, [], None
        async for chunk in self.pipeline.run(ctx):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.delta.content and first is None:
                    first = time.perf_counter()
                parts.append(choice.delta.content or "")
        total = time.perf_counter() - t0
        return Run(route, (first or time.perf_counter()) - t0, total, usage.prompt_tokens,
                   usage.prompt_tokens_details.cached_tokens, "".join(parts), ctx.report.transforms)


def summarise(runs: list[Run]) -> dict:
    return {"n": len(runs),
            "ttft_s": round(statistics.median(r.ttft_s for r in runs), 3),
            "total_s": round(statistics.median(r.total_s for r in runs), 3),
            "prompt_tokens": round(statistics.mean(r.prompt_tokens for r in runs), 1),
            "prefix_hit": round(sum(r.cached_tokens for r in runs)
                                / max(1, sum(r.prompt_tokens for r in runs)), 3)}


async def long_context(bench: Bench, n: int) -> dict:
    """Planted-fact documents with a question: compression off, lexical, lexical+embeddings."""
    runs: dict[str, list[Run]] = {"plain": [], "compress": [], "compress-embed": []}
    answered: dict[str, int] = dict.fromkeys(runs, 0)
    for i, case in enumerate(make_cases(n, paragraphs=40, seed=7)):
        for route in runs:  # interleaved; a distinct system line keeps prefix caches apart
            messages = [{"role": "system", "content": f"Answer from the document. ({route})"},
                        {"role": "user", "content": case.prompt}]
            run = await bench.ask(route, messages, max_tokens=16)
            if i:  # the first case warms up
                runs[route].append(run)
                answered[route] += case.answer in run.text
    out = {route: summarise(r) | {"model_answered": answered[route]} for route, r in runs.items()}
    base = out["plain"]["ttft_s"]
    for route in out:
        out[route]["ttft_vs_plain"] = round(out[route]["ttft_s"] / base, 3)
    return out


async def windowing(bench: Bench, turns: int) -> dict:
    """A chat replayed turn by turn with scripted replies: no window, sliding, anchored."""
    out = {}
    for route in ("plain", "window-sliding", "window-anchored"):
        messages = [{"role": "system", "content": f"You are a support agent ({route})."}]
        runs = []
        for t in range(turns):
            messages.append({"role": "user", "content": f"Turn {t}: my order {1000 + t} has "
                             "an issue with " + "the delivery and billing " * 12})
            runs.append(await bench.ask(route, messages, max_tokens=4))
            messages.append({"role": "assistant", "content": f"Noted for order {1000 + t}. "
                             + "We will check the shipment and invoice. " * 6})
        out[route] = summarise(runs[2:])
    return out


async def decomposition(bench: Bench) -> dict:
    runs: dict[str, list[Run]] = {"plain": [], "split": []}
    for i, q in enumerate(QUESTIONS * 2):
        for route in runs:
            messages = [{"role": "system", "content": f"Be brief. ({route} {i})"},
                        {"role": "user", "content": q}]
            runs[route].append(await bench.ask(route, messages, max_tokens=48))
    out = {route: summarise(r) for route, r in runs.items()}
    out["split"]["transforms"] = runs["split"][0].transforms
    return out


async def map_reduce(bench: Bench, n: int) -> dict:
    """Documents over a (pretend) 1,024-token context: one long call vs map-reduce."""
    runs: dict[str, list[Run]] = {"plain": [], "map-reduce": []}
    for case in make_cases(n, paragraphs=40, seed=23):
        for route in runs:
            messages = [{"role": "system", "content": f"Answer from the document. ({route})"},
                        {"role": "user", "content": case.prompt}]
            runs[route].append(await bench.ask(route, messages, max_tokens=24))
    out = {route: summarise(r) for route, r in runs.items()}
    out["map-reduce"]["transforms"] = runs["map-reduce"][0].transforms
    return out


async def quality(bench: Bench, prune_cases: int) -> dict:
    counter = bench.stage.counter(bench.config.route("plain"))
    cases = make_cases(20, paragraphs=40, seed=11)
    out = {}
    for name, methods, embed in (("lossless", ("lossless",), None),
                                 ("select", ("lossless", "select"), None),
                                 ("select+embed", ("lossless", "select"), True),
                                 ("prune", ("lossless", "prune"), None)):
        subset = cases[:prune_cases] if name == "prune" else cases
        if not subset:
            continue
        scorer = await bench.stage.token_scorer() if name == "prune" else None
        compressor = Compressor(counter, _shared_embed() if embed else None, scorer)
        settings = CompressSettings(min_tokens=0, target_ratio=0.3, methods=methods,
                                    prefill_tokens_per_s=1.0)  # always worth it: measure all

        async def run(case, compressor=compressor, settings=settings):
            msgs = [{"role": "user", "content": case.prompt}]
            return (await compressor.compress(msgs, settings))[0][0]["content"]

        if embed:
            await run(subset[0])  # load the embedding model outside the timing
        report = await evaluate(subset, run, counter.count_text)
        out[name] = {"cases": report.cases, "ratio": round(report.ratio, 3),
                     "ms_per_ktok": round(1000 * report.seconds / report.tokens_in * 1000, 2),
                     "facts_survived": round(report.survival, 3)}
    return out


def lossless_on_exports(bench: Bench) -> dict:
    """Lossless compression where it has work: pretty-printed JSON and repeated boilerplate."""
    counter = bench.stage.counter(bench.config.route("plain"))
    records = [{"id": i, "status": "shipped", "items": [{"sku": f"A{i}{j}", "qty": j}
                                                         for j in range(3)]} for i in range(40)]
    footer = "Confidential: this export is for internal use by the support team only."
    pages = [json.dumps(records[i:i + 10], indent=2) + f"\n\n{footer}" for i in range(0, 40, 10)]
    text = "\n\n\n".join(pages)
    t0 = time.perf_counter()
    out = compress_lossless(text).text
    seconds = time.perf_counter() - t0
    before, after = counter.count_text(text), counter.count_text(out)
    same = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    return {"tokens_in": before, "ratio": round(after / before, 3),
            "ms_per_ktok": round(seconds * 1e6 / before, 2),
            "records_intact": sum(same, []) == records}


def counting_speed(bench: Bench) -> dict:
    counter = bench.stage.counter(bench.config.route("plain"))
    chat = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"message {i} " + "some words here " * 40} for i in range(20)]
    t0 = time.perf_counter()
    counter.count_messages(chat)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(20):
        for m in chat:
            counter.count_text(m["content"])
    warm = (time.perf_counter() - t0) / 20
    return {"whole_chat_cold_ms": round(cold * 1000, 2),
            "per_message_memo_us": round(warm / len(chat) * 1e6, 2)}


def break_even(long_ctx: dict, qual: dict) -> dict:
    """Prefill cost per 1k tokens vs each method's cost per 1k input tokens (at ratio 0.3)."""
    plain = long_ctx["plain"]
    prefill_s_per_ktok = plain["ttft_s"] / plain["prompt_tokens"] * 1000
    out = {"engine_prefill_ms_per_ktok": round(prefill_s_per_ktok * 1000, 1)}
    for name, q in qual.items():
        saved_ms = (1 - q["ratio"]) * prefill_s_per_ktok * 1000
        out[f"{name}_pays"] = q["ms_per_ktok"] < saved_ms
        # the upstream prefill rate (tokens/s) below which the method pays for itself
        out[f"{name}_break_even_prefill_tps"] = max(0, round(
            (1 - q["ratio"]) * 1e6 / max(q["ms_per_ktok"], 1e-6)))
    return out


async def main_async(args: argparse.Namespace) -> dict:
    bench = Bench()
    report: dict = {"counting": counting_speed(bench)}
    report["long_context"] = await long_context(bench, args.cases + 1)
    report["quality"] = await quality(bench, args.prune_cases)
    report["lossless_exports"] = lossless_on_exports(bench)
    report["break_even"] = break_even(report["long_context"], report["quality"])
    report["windowing"] = await windowing(bench, args.turns)
    report["decomposition"] = await decomposition(bench)
    if args.map_reduce_cases:
        report["map_reduce"] = await map_reduce(bench, args.map_reduce_cases)
    await bench.engine.shutdown()
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--prune-cases", type=int, default=2)
    parser.add_argument("--map-reduce-cases", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    report = asyncio.run(main_async(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
