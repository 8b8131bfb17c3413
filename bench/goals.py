"""The issue's goals, judged from sweeps of the same workload against a baseline target.

For each workload: take the baseline's (llama.cpp server's) highest rate within the SLO;
at that rate a target's p95 TTFT should be at most 0.3× the baseline's, and the target's
own highest rate within the SLO should be at least 3× the baseline's. When a target never
failed up to the sweep ceiling its rate is only a lower bound, marked "≥".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from bench.sweep import SweepResult

P95_RATIO_GOAL = 0.3
RATE_RATIO_GOAL = 3.0


@dataclass
class GoalRow:
    workload: str
    target: str
    baseline: str
    baseline_rate: float | None  # the baseline's highest rate within the SLO
    baseline_p95_ms: float | None
    p95_ms: float | None  # the target's p95 TTFT at baseline_rate
    p95_ratio: float | None
    max_rate: float | None  # the target's highest rate within the SLO
    rate_ratio: float | None
    rate_is_lower_bound: bool  # the target passed every rate up to the ceiling

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


def comparison_rates(sweeps: list[SweepResult], baseline: str) -> dict[str, float]:
    """Per workload, the baseline's highest rate within the SLO (where it has one)."""
    return {s.workload: s.max_rate for s in sweeps
            if s.target == baseline and s.max_rate is not None}


def evaluate_goals(sweeps: list[SweepResult], baseline: str) -> list[GoalRow]:
    """One row per (workload, non-baseline target) that has a baseline sweep."""
    rows = []
    for base in (s for s in sweeps if s.target == baseline):
        rate = base.max_rate
        base_run = base.run_at(rate)
        base_p95 = base_run.p95_ttft_ms() if base_run else None
        for other in (s for s in sweeps if s.workload == base.workload and s.target != baseline):
            run = other.run_at(rate)
            p95 = run.p95_ttft_ms() if run else None
            ratio = p95 / base_p95 if p95 is not None and base_p95 else None
            tried_max = max((r for r, _ in other.points()), default=None)
            rate_ratio = other.max_rate / rate if other.max_rate and rate else None
            rows.append(GoalRow(
                workload=base.workload, target=other.target, baseline=baseline,
                baseline_rate=rate, baseline_p95_ms=base_p95, p95_ms=p95, p95_ratio=ratio,
                max_rate=other.max_rate, rate_ratio=rate_ratio,
                rate_is_lower_bound=other.max_rate is not None and other.max_rate == tried_max))
    return rows


def _x(v: float | None, fmt: str = ".2f") -> str:
    if v is None:
        return "–"
    return "∞" if math.isinf(v) else format(v, fmt)


def _verdict(met: bool | None) -> str:
    return {None: "n/a", True: "met", False: "missed"}[met]


def goals_table(rows: list[GoalRow]) -> str:
    """Markdown: the two goals per workload and target, with the numbers behind them."""
    lines = [f"| workload | target | baseline rate/s | baseline p95 | target p95 | p95 ratio "
             f"(goal ≤ {P95_RATIO_GOAL}) | target max rate/s | rate ratio (goal ≥ "
             f"{RATE_RATIO_GOAL:g}) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bound = "≥" if r.rate_is_lower_bound else ""
        lines.append(
            f"| {r.workload} | {r.target} | {_x(r.baseline_rate, 'g')} | "
            f"{_x(r.baseline_p95_ms, '.0f')} | {_x(r.p95_ms, '.0f')} | "
            f"{_x(r.p95_ratio)} {_verdict(r.p95_goal_met)} | {bound}{_x(r.max_rate, 'g')} | "
            f"{bound}{_x(r.rate_ratio)} {_verdict(r.rate_goal_met)} |")
    return "\n".join(lines)
