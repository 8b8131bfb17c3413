"""Prompt compression that pays for itself: lossless first, then selection, then pruning.

Runs only on prompts of at least `min_tokens`, and each lossy method only when its expected
cost is below the prefill time it is expected to save: saved tokens ÷ the upstream's prefill
rate (tokens/s, measured by the caller). Method costs are learnt as they run (seconds per
1,000 input tokens, moving average, seeded with measurements from this machine). Only long
messages are touched (system prompt, user turns, tool results); the question used for
query-aware selection is the last user turn.

A long text seen before is kept verbatim: the upstream's prefix cache most likely still
holds its KV, so its prefill is nearly free, while a (query-dependent) compressed copy would
be a cold prefill every time. `SeenTexts` remembers what was sent; a question turn is keyed
by its text before the question, so the same document asked about again counts as a repeat.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from prompts.interfaces import EmbedFn, Message, TokenCounter, TokenScorer, message_text
from prompts.lossless import compress_lossless
from prompts.prune import prune_text
from prompts.select import select_passages

MIN_MESSAGE_TOKENS = 200  # shorter messages are left alone
# seconds per 1,000 input tokens, measured on the 2-core CPU this project is built on
# (bench/experiments/transforms_bench.py); refined at run time by `CostModel.update`
DEFAULT_COST_PER_KTOK = {"lossless": 0.006, "select": 0.011, "select+embed": 0.93,
                         "prune": 10.7}


@dataclass
class CostModel:
    """Seconds per 1,000 tokens per method, as an exponential moving average."""

    per_ktok: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_COST_PER_KTOK))
    alpha: float = 0.2

    def estimate(self, method: str, tokens: int) -> float:
        return self.per_ktok.get(method, 0.0) * tokens / 1000

    def update(self, method: str, tokens: int, seconds: float) -> None:
        if tokens <= 0:
            return
        seen = seconds * 1000 / tokens
        old = self.per_ktok.get(method)
        self.per_ktok[method] = seen if old is None else (1 - self.alpha) * old + self.alpha * seen


@dataclass
class SeenTexts:
    """An LRU set of long texts already sent upstream (their digests)."""

    capacity: int = 4096
    _digests: OrderedDict[bytes, None] = field(default_factory=OrderedDict)

    def check_and_add(self, text: str) -> bool:
        """Whether `text` was seen before; remembers it either way."""
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        seen = key in self._digests
        self._digests[key] = None
        self._digests.move_to_end(key)
        while len(self._digests) > self.capacity:
            self._digests.popitem(last=False)
        return seen

    def __len__(self) -> int:
        return len(self._digests)


@dataclass
class CompressSettings:
    min_tokens: int = 1500
    target_ratio: float = 0.5
    methods: tuple[str, ...] = ("lossless", "select")
    prefill_tokens_per_s: float = 1000.0  # the upstream's prefill rate (break-even input)


@dataclass
class CompressReport:
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "select:cost>saving", ...

    @property
    def ratio(self) -> float:
        return self.tokens_out / self.tokens_in if self.tokens_in else 1.0


class Compressor:
    """Compresses the long messages of a chat; LMs and embeddings come in as parameters."""

    def __init__(self, counter: TokenCounter, embed: EmbedFn | None = None,
                 scorer: TokenScorer | None = None, costs: CostModel | None = None,
                 seen: SeenTexts | None = None) -> None:
        self.counter, self.embed, self.scorer = counter, embed, scorer
        self.costs = costs or CostModel()
        self.seen = seen

    async def compress(self, messages: list[Message],
                       settings: CompressSettings) -> tuple[list[Message], CompressReport]:
        report = CompressReport()
        sizes = [self.counter.count_text(message_text(m)) for m in messages]
        report.tokens_in = report.tokens_out = sum(sizes)
        if report.tokens_in < settings.min_tokens:
            report.skipped.append(f"below min_tokens={settings.min_tokens}")
            return messages, report
        t0 = time.perf_counter()
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        query = _question(message_text(messages[last_user])) if last_user >= 0 else ""
        out = list(messages)
        for i, m in enumerate(messages):
            if sizes[i] < MIN_MESSAGE_TOKENS or m.get("role") == "assistant":
                continue
            if self._repeated(message_text(m), i == last_user):
                report.skipped.append(f"message {i}:repeat")
                continue
            text = await self._compress_text(message_text(m), sizes[i], query, i == last_user,
                                             settings, report)
            out[i] = {**m, "content": text}
        report.tokens_out = sum(self.counter.count_text(message_text(m)) for m in out)
        report.seconds = time.perf_counter() - t0
        return out, report

    def _repeated(self, text: str, is_question_turn: bool) -> bool:
        """Seen before (a question turn: the part before its question)? Remembers it."""
        if self.seen is None:
            return False
        stable = text.strip().rpartition("\n\n")[0] if is_question_turn else text
        return self.seen.check_and_add(stable or text)

    async def _compress_text(self, text: str, tokens: int, query: str, is_question_turn: bool,
                             settings: CompressSettings, report: CompressReport) -> str:
        rate = settings.prefill_tokens_per_s
        if "lossless" in settings.methods:
            text, tokens = await self._timed("lossless", tokens, report, _lossless(text),
                                             self.counter)
        budget = max(1, int(tokens * settings.target_ratio))
        saving_s = (tokens - budget) / rate
        if "select" in settings.methods and tokens > budget:
            # embeddings rank better but cost more: fall back to BM25 when they do not pay
            options = (["select+embed"] if self.embed is not None else []) + ["select"]
            method = None
            for option in options:
                if self.costs.estimate(option, tokens) < saving_s:
                    method = option
                    break
                report.skipped.append(f"{option}:cost>saving")
            if method is not None:
                embed = self.embed if method == "select+embed" else None
                job = select_passages(text, query, budget, self.counter.count_text, embed,
                                      keep_last=is_question_turn)
                text, tokens = await self._timed(method, tokens, report, job, self.counter)
        if "prune" in settings.methods and self.scorer is not None and tokens > budget:
            saving_s = tokens * (1 - settings.target_ratio) / rate
            if self.costs.estimate("prune", tokens) < saving_s:
                job = _pruned(text, self.scorer, settings.target_ratio, is_question_turn)
                text, tokens = await self._timed("prune", tokens, report, job, self.counter)
            else:
                report.skipped.append("prune:cost>saving")
        return text

    async def _timed(self, method: str, tokens: int, report: CompressReport, job,
                     counter: TokenCounter) -> tuple[str, int]:
        t0 = time.perf_counter()
        text = await job
        self.costs.update(method, tokens, time.perf_counter() - t0)
        after = counter.count_text(text)
        if after < tokens and method not in report.applied:
            report.applied.append(method)
        return text, after


async def _lossless(text: str) -> str:
    return compress_lossless(text).text


async def _pruned(text: str, scorer: TokenScorer, ratio: float, keep_question: bool) -> str:
    """Pruned text; in the question's own turn the question itself is kept whole."""
    head, sep, question = text.rpartition("\n\n") if keep_question else ("", "", "")
    if not head:
        return (await prune_text(text, scorer, ratio)).text
    return (await prune_text(head, scorer, ratio)).text + sep + question


def _question(text: str) -> str:
    """The question in a user turn: its last paragraph (a pasted document comes first)."""
    return text.strip().rpartition("\n\n")[2][-2000:]
