"""A route's cache settings as plain data (the gateway maps its YAML policy onto this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cache.keys import CacheRequest

CANDIDATE_FLOOR = 0.5  # cosine a candidate needs to reach the verifier (guard on)
COSINE_ONLY_BAR = 0.9  # cosine any hit needs with the guard off


@dataclass(frozen=True)
class CacheSettings:
    """What the caches do for one route; `cache/` never sees the gateway's pydantic config."""

    route: str
    exact_enabled: bool = False
    exact_ttl_s: float = 3600.0
    exact_allow_tools: bool = True  # the exact cache keeps requests that carry tools too
    semantic_enabled: bool = False
    threshold: float | None = None  # guard on: cosine a candidate needs to be verified
    # (default CANDIDATE_FLOOR); guard off: cosine any hit needs (default COSINE_ONLY_BAR)
    verifier_threshold: float | None = None  # the verifier score served (None: the
    # cross-validated one shipped with the model, cache/data/pair_model.json)
    semantic_ttl_s: float = 86400.0
    max_temperature: float = 1.0  # the SDKs' default temperature (1.0) is let in
    context: Literal["full", "system", "none", "semantic"] = "full"
    allow_tools: bool = False
    guard: bool = True
    adaptive_skip: bool = True  # stop semantic lookups while the route's hit rate stays ~0
    judge: str | None = None  # who judges grey-zone misses ("agreement", "upstream:NAME");
    # None: no grey zone, lookups exactly as without one
    judge_floor: float = 0.2  # the verifier score a candidate needs to be judged
    max_false_hit_rate: float = 0.01  # the route's error budget (cache/budget.py)
    labels: str | None = None  # the labelled-pairs log judgements are appended to

    @property
    def enabled(self) -> bool:
        return self.exact_enabled or self.semantic_enabled

    def exact_on(self, req: CacheRequest) -> bool:
        """Whether the exact cache serves and keeps `req` (tools only where allowed)."""
        return self.exact_enabled and (self.exact_allow_tools or not req.has_tools)

    @property
    def floor(self) -> float:
        """The cosine a candidate needs: to be verified (guard on) or to be served (off)."""
        if self.threshold is not None:
            return self.threshold
        return CANDIDATE_FLOOR if self.guard else COSINE_ONLY_BAR
