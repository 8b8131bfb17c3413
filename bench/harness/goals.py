"""The issue's goals, judged from sweeps of the same workload against a baseline target.

For each workload: take the baseline's (llama.cpp's `llama-server`, parallel slots) highest
rate within the SLO; at that rate a target's p95 TTFT should be at most 0.5× the baseline's,
and the target's own highest rate within the SLO at least 2× the baseline's. When a target never
failed up to the sweep ceiling its rate is only a lower bound, marked "≥".

When the baseline met the SLO at no rate tried, both goals are judged at the baseline's lowest rate
tried instead: the p95 ratio there, and a rate ratio that is a strict lower bound (the
baseline's own rate is below that lowest rate), marked ">".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from bench.harness.sweep import SweepResult

P95_RATIO_GOAL = 0.5
RATE_RATIO_GOAL = 2.0


@dataclass
class GoalRow:
    workload: str
    target: str
    baseline: str
    baseline_rate: float | None  # the baseline's highest rate within the SLO
    compared_at: float | None  # baseline_rate, else the baseline's lowest rate tried
    baseline_p95_ms: float | None  # at compared_at
    p95_ms: float | None  # the target's p95 TTFT at compared_at
    p95_ratio: float | None
    max_rate: float | None  # the target's highest rate within the SLO
    rate_ratio: float | None
    rate_is_lower_bound: bool  # the target passed every rate up to the ceiling

    @property
    def baseline_never_met_slo(self) -> bool:
        return self.baseline_rate is None and self.compared_at is not None

    @property
    def p95_goal_met(self) -> bool | None:
        return None if self.p95_ratio is None else self.p95_ratio <= P95_RATIO_GOAL

    @property
    def rate_goal_met(self) -> bool | None:
        return None if self.rate_ratio is None else self.rate_ratio >= RATE_RATIO_GOAL

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(p95_goal_met=self.p95_goal_met, rate_goal_met=self.rate_goal_met)
        return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}


def comparison_rate(base: SweepResult) -> float | None:
    """The baseline's highest rate within the SLO, else its lowest rate tried."""
    if base.max_rate is not None:
        return base.max_rate
    return min((rate for rate, _ in base.points()), default=None)


def comparison_rates(sweeps: list[SweepResult], baseline: str) -> dict[str, float]:
    """Per workload, the rate every target is compared at (see `comparison_rate`)."""
    rates = {s.workload: comparison_rate(s) for s in sweeps if s.target == baseline}
    return {workload: rate for workload, rate in rates.items() if rate is not None}


def evaluate_goals(sweeps: list[SweepResult], baseline: str) -> list[GoalRow]:
    """One row per (workload, non-baseline target) that has a baseline sweep."""
    rows = []
    for base in (s for s in sweeps if s.target == baseline):
        rate = comparison_rate(base)
        base_run = base.run_at(rate)
        base_p95 = base_run.p95_ttft_ms() if base_run else None
        for other in (s for s in sweeps if s.workload == base.workload and s.target != baseline):
            run = other.run_at(rate)
            p95 = run.p95_ttft_ms() if run else None
            ratio = _p95_ratio(p95, base_p95)
            tried_max = max((r for r, _ in other.points()), default=None)
            rate_ratio = other.max_rate / rate if other.max_rate and rate else None
            rows.append(GoalRow(
                workload=base.workload, target=other.target, baseline=baseline,
                baseline_rate=base.max_rate, compared_at=rate, baseline_p95_ms=base_p95,
                p95_ms=p95, p95_ratio=ratio,
                max_rate=other.max_rate, rate_ratio=rate_ratio,
                rate_is_lower_bound=other.max_rate is not None and other.max_rate == tried_max))
    return rows


def _p95_ratio(p95: float | None, base_p95: float | None) -> float | None:
    """target ÷ baseline; 0 when only the baseline never answered, None when neither did."""
    if p95 is None or not base_p95 or (math.isinf(p95) and math.isinf(base_p95)):
        return None
    return 0.0 if math.isinf(base_p95) else p95 / base_p95


def _x(v: float | None, fmt: str = ".2f") -> str:
    if v is None:
        return "–"
    return "∞" if math.isinf(v) else format(v, fmt)


def _verdict(met: bool | None) -> str:
    return {None: "n/a", True: "met", False: "missed"}[met]


def goals_table(rows: list[GoalRow]) -> str:
    """Markdown: the two goals per workload and target, with the numbers behind them."""
    lines = [f"| workload | target | baseline rate/s | compared at rate/s | baseline p95 | "
             f"target p95 | p95 ratio "
             f"(goal ≤ {P95_RATIO_GOAL}) | target max rate/s | rate ratio (goal ≥ "
             f"{RATE_RATIO_GOAL:g}) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bound = "≥" if r.rate_is_lower_bound else ""
        ratio_bound = ">" if r.baseline_never_met_slo else bound
        base_rate = "none" if r.baseline_never_met_slo else _x(r.baseline_rate, "g")
        lines.append(
            f"| {r.workload} | {r.target} | {base_rate} | {_x(r.compared_at, 'g')} | "
            f"{_x(r.baseline_p95_ms, '.0f')} | {_x(r.p95_ms, '.0f')} | "
            f"{_x(r.p95_ratio)} {_verdict(r.p95_goal_met)} | {bound}{_x(r.max_rate, 'g')} | "
            f"{ratio_bound}{_x(r.rate_ratio)} {_verdict(r.rate_goal_met)} |")
    return "\n".join(lines)
