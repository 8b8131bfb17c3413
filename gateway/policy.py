"""Per-route policy sections of the config file: cache, window, compress, decompose.

Owned jointly: the cache helper extends the cache sections, the prompts helper the transform
sections; `gateway/config.py` composes them into `RouteConfig`. Every field is documented in
the README's configuration reference.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExactPolicy(_Section):
    enabled: bool = False
    ttl_s: float = Field(default=3600, gt=0)
    allow_tools: bool = True  # false: requests with tools skip it (x-cache-bypass-reason: exact:tools)


class JudgePolicy(_Section):
    """Who judges a route's grey-zone misses (cache/grey.py), and how often."""

    upstream: str | None = None  # ask this upstream (a name under `upstreams:`) in one word
    agreement: bool = False  # compare the entry's answer with the fresh one (no upstream call)
    floor: float = Field(default=0.2, ge=0.0, le=1.0)  # verifier score a pair needs to be judged
    rate_per_s: float = Field(default=1.0, gt=0)  # judgements a second, at most; queue 10x that
    similarity: float = Field(default=0.97, ge=0.0, le=1.0)  # agreement: the answers' cosine
    timeout_s: float = Field(default=10.0, gt=0)  # an upstream judge's reply must be in by then
    labels: str | None = None  # labelled-pairs log; None: headstart-labels/<route>.jsonl

    @model_validator(mode="after")
    def _one_judge(self) -> JudgePolicy:
        if (self.upstream is None) == (not self.agreement):
            raise ValueError("a judge is either `agreement` or `{upstream: NAME}`")
        return self


class SemanticPolicy(_Section):
    enabled: bool = False
    # guard on: cosine a candidate needs to reach the verifier (default 0.5);
    # guard off: cosine any hit needs (default 0.9)
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    verifier_threshold: float | None = Field(default=None, ge=0.0, le=1.0)  # None: shipped
    ttl_s: float = Field(default=86400, gt=0)
    max_temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # lets the SDK default in
    # what must match before the last user turn: `semantic` = earlier user turns by meaning
    context: Literal["full", "system", "none", "semantic"] = "full"
    allow_tools: bool = False
    guard: bool = True  # verify candidates: exact checks, then the pair verifier
    adaptive_skip: bool = True  # skip semantic lookups while the route's hit rate stays ~0
    adaptive: bool | None = None  # no effect since the pair verifier; accepted for old configs
    judge: JudgePolicy | None = None  # grey-zone misses judged off the request path; off
    max_false_hit_rate: float = Field(default=0.01, gt=0.0, le=0.5)  # the error budget

    @field_validator("judge", mode="before")
    @classmethod
    def _judge_word(cls, v: object) -> object:
        return {"agreement": True} if v == "agreement" else v


class CachePolicy(_Section):
    exact: ExactPolicy = Field(default_factory=ExactPolicy)
    semantic: SemanticPolicy = Field(default_factory=SemanticPolicy)
    namespace_header: bool = True  # honour x-cache-namespace from callers


class WindowPolicy(_Section):
    max_input_tokens: int | None = Field(default=None, gt=0)
    dropped: Literal["drop", "summarize"] = "drop"
    summarizer: str | None = None  # upstream name; default: the route's upstream
    trim_middle: bool = False  # if system + last turn alone do not fit: trim instead of 413
    summary_max_tokens: int = Field(default=256, ge=16)  # room kept for the summary
    anchored: bool = True  # move the cut in coarse steps so the kept prefix stays byte-stable
    low_water: float = Field(default=0.6, gt=0.0, le=1.0)  # share of the budget after a cut


class CompressPolicy(_Section):
    enabled: bool = False
    min_tokens: int = Field(default=1500, ge=0)
    target_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    methods: list[Literal["lossless", "select", "prune"]] = Field(
        default_factory=lambda: ["lossless", "select"]
    )
    prefill_tokens_per_s: float | None = Field(default=None, gt=0)  # None: measured live
    embeddings: bool = True  # rank passages with sentence embeddings as well as BM25


class DecomposePolicy(_Section):
    enabled: bool = False
    max_parts: int = Field(default=6, ge=2, le=32)
    map_reduce: bool = False
    context_tokens: int | None = Field(default=None, gt=0)  # map-reduce above this; None:
    # the engine's context length for engine upstreams, else 8192
    map_max_tokens: int = Field(default=256, ge=16)  # answer length of each map call


class RoutePolicy(_Section):
    """All policy sections a route carries (each defaults to off)."""

    cache: CachePolicy = Field(default_factory=CachePolicy)
    window: WindowPolicy = Field(default_factory=WindowPolicy)
    compress: CompressPolicy = Field(default_factory=CompressPolicy)
    decompose: DecomposePolicy = Field(default_factory=DecomposePolicy)
