"""Cache counters per route: hits (exact, semantic), misses, bypasses, guard rejections,
stores and store errors, and what judges did with grey-zone misses. Plain in-process
counters; the admin API and metrics read them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass


@dataclass
class RouteCounters:
    exact_hits: int = 0
    semantic_hits: int = 0
    misses: int = 0
    bypasses: int = 0
    guard_rejections: int = 0
    stores: int = 0
    store_errors: int = 0
    semantic_skips: int = 0  # semantic lookups skipped on an idle route (cache/skip.py)
    grey_zone: int = 0  # misses with a candidate for the judge (cache/grey.py)
    learned_hits: int = 0  # semantic hits under the threshold, by judged evidence
    promotions: int = 0  # judged "yes": the question became an alias of the entry
    refusals: int = 0  # judged "no": the question is never served that entry
    judge_errors: int = 0  # judgements that got no verdict (judge failed or down)
    judge_shed: int = 0  # grey-zone pairs dropped unjudged (queue full, gateway busy)

    @property
    def hits(self) -> int:
        return self.exact_hits + self.semantic_hits


class CacheStats:
    """`record(route, outcome)`; `snapshot()` -> {route: {counter: n, ..., "hits": n}}."""

    OUTCOMES = ("exact_hits", "semantic_hits", "misses", "bypasses", "guard_rejections",
                "stores", "store_errors", "semantic_skips", "grey_zone", "learned_hits",
                "promotions", "refusals", "judge_errors", "judge_shed")

    def __init__(self) -> None:
        self._routes: dict[str, RouteCounters] = defaultdict(RouteCounters)

    def record(self, route: str, outcome: str, n: int = 1) -> None:
        if outcome not in self.OUTCOMES:
            raise ValueError(f"unknown cache outcome {outcome!r}")
        counters = self._routes[route]
        setattr(counters, outcome, getattr(counters, outcome) + n)

    def get(self, route: str) -> RouteCounters:
        return self._routes[route]

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {route: {**asdict(c), "hits": c.hits} for route, c in sorted(self._routes.items())}

    def totals(self) -> dict[str, int]:
        total = RouteCounters()
        for c in self._routes.values():
            for name in self.OUTCOMES:
                setattr(total, name, getattr(total, name) + getattr(c, name))
        return {**asdict(total), "hits": total.hits}
