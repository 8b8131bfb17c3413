"""`--sweep`: raise the request rate step by step to find the highest rate within the SLO.

The rate doubles while p95 TTFT stays within the SLO; when the starting rate already
fails it halves instead. Between the last passing and the first failing rate the sweep
then bisects (geometric midpoints) `refine` times. The answer is the highest passing rate
below the lowest failing one, so one lucky high-rate run cannot hide a failure under it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench.harness.stats import RunSummary


def highest_rate_within_slo(points: list[tuple[float, float]], slo_ms: float) -> float | None:
    """From (rate, p95 TTFT ms) points: the highest passing rate below every failing rate."""
    failing = [rate for rate, p95 in points if not p95 <= slo_ms]
    ceiling = min(failing) if failing else math.inf
    passing = [rate for rate, p95 in points if p95 <= slo_ms and rate < ceiling]
    return max(passing) if passing else None


@dataclass
class SweepResult:
    target: str
    workload: str
    slo_ms: float
    runs: list[RunSummary] = field(default_factory=list)

    def points(self) -> list[tuple[float, float]]:
        return sorted((r.rate, r.p95_ttft_ms()) for r in self.runs)

    @property
    def max_rate(self) -> float | None:
        return highest_rate_within_slo(self.points(), self.slo_ms)

    def run_at(self, rate: float | None) -> RunSummary | None:
        """The run at exactly `rate`, if the sweep made one."""
        return next((r for r in self.runs if rate is not None and r.rate == rate), None)

    def to_dict(self) -> dict:
        return {"target": self.target, "workload": self.workload, "slo_ms": self.slo_ms,
                "max_rate_within_slo": self.max_rate,
                "points": [{"rate": r, "p95_ttft_ms": p if math.isfinite(p) else "inf"}
                           for r, p in self.points()]}


def _round_rate(rate: float) -> float:
    return float(f"{rate:.3g}")


async def sweep_rates(run_at: Callable[[float], Awaitable[RunSummary]], *, start_rate: float,
                      slo_ms: float, factor: float = 2.0, max_rate: float = 64.0,
                      min_rate: float = 0.05, refine: int = 1, target: str = "",
                      workload: str = "") -> SweepResult:
    """Call `run_at(rate)` at rising (or falling) rates; see the module docstring."""
    result = SweepResult(target=target, workload=workload, slo_ms=slo_ms)

    async def passes(rate: float) -> bool:
        summary = await run_at(rate)
        result.runs.append(summary)
        return summary.p95_ttft_ms() <= slo_ms

    lo: float | None = None
    hi: float | None = None
    rate = _round_rate(start_rate)
    if await passes(rate):
        lo = rate
        while rate * factor <= max_rate:
            rate = _round_rate(rate * factor)
            if not await passes(rate):
                hi = rate
                break
            lo = rate
    else:
        hi = rate
        while rate / factor >= min_rate:
            rate = _round_rate(rate / factor)
            if await passes(rate):
                lo = rate
                break
            hi = rate
    for _ in range(refine):
        if lo is None or hi is None:
            break
        mid = _round_rate(math.sqrt(lo * hi))
        if mid in (lo, hi):
            break
        if await passes(mid):
            lo = mid
        else:
            hi = mid
    return result
