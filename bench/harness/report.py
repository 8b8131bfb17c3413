"""The report folder: `report.md` (tables), `report.html` (the same with the plots inline,
self-contained: bench/harness/report_html.py), `report.json`, and PNG plots per workload.

Plots (matplotlib, Agg backend, no display needed): `ttft_cdf_<workload>.png` with one
TTFT CDF per target, and `p95_ttft_vs_rate_<workload>.png` with each target's p95 TTFT
against the request rate and the SLO line. Requests that never got a token sit at the
right edge of the CDF and at the top of the rate plot, marked "x".
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from bench.harness.report_html import write_html  # noqa: E402
from bench.harness.stats import RunSummary  # noqa: E402
from bench.harness.sweep import SweepResult  # noqa: E402


def _fmt(v: float | str | None, digits: int = 0) -> str:
    if v is None:
        return "–"
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "∞"
    return f"{v:,.{digits}f}"


RUN_HEADER = ("| target | workload | rate/s | reqs | errors | unfinished | TTFT p50 | TTFT p95 | TTFT p99 | "
              "TPOT p50 | ITL p50 | E2E p95 | done/s | goodput | x-cache | cached tok |")


def runs_table(runs: list[RunSummary]) -> str:
    """Markdown: one row per run; latencies in ms, goodput = share within the SLO."""
    lines = [RUN_HEADER, "|" + "---|" * RUN_HEADER.count(" | ") + "---|"]
    for r in sorted(runs, key=lambda r: (r.workload, r.target, r.rate)):
        cache = " ".join(f"{k}:{v}" for k, v in sorted(r.cache.items()))
        cached = f"{100.0 * r.cached_tokens / r.prompt_tokens:.0f}%" if r.prompt_tokens else "–"
        lines.append(
            f"| {r.target} | {r.workload} | {r.rate:g} | {r.requests} | {r.errors} | "
            f"{r.unfinished} | "
            f"{_fmt(r.ttft_ms['p50'])} | {_fmt(r.ttft_ms['p95'])} | {_fmt(r.ttft_ms['p99'])} | "
            f"{_fmt(r.tpot_ms['p50'], 1)} | {_fmt(r.itl_ms['p50'], 1)} | "
            f"{_fmt(r.e2e_ms['p95'])} | {r.throughput_rps:.2f} | {100 * r.goodput:.0f}% | "
            f"{cache} | {cached} |")
    return "\n".join(lines)


def sweeps_table(sweeps: list[SweepResult]) -> str:
    lines = ["| target | workload | highest rate within SLO | p95 TTFT there (ms) | rates tried |",
             "|---|---|---|---|---|"]
    for s in sweeps:
        best = s.run_at(s.max_rate)
        tried = ", ".join(f"{r:g}" for r, _ in s.points())
        lines.append(f"| {s.target} | {s.workload} | {f'{s.max_rate:g}' if s.max_rate else 'none'}"
                     f" | {_fmt(best.p95_ttft_ms()) if best else '–'} | {tried} |")
    return "\n".join(lines)


def _cdf_runs(runs: list[RunSummary], sweeps: list[SweepResult], workload: str) -> list[RunSummary]:
    """Per target: the run at its highest rate within the SLO, else its lowest-rate run."""
    chosen = []
    targets = dict.fromkeys(r.target for r in runs if r.workload == workload)
    for target in targets:
        mine = sorted((r for r in runs if r.workload == workload and r.target == target),
                      key=lambda r: r.rate)
        sweep = next((s for s in sweeps if s.target == target and s.workload == workload), None)
        best = sweep.run_at(sweep.max_rate) if sweep else None
        chosen.append(best or next((r for r in reversed(mine) if r.within_slo()), mine[0]))
    return chosen


def plot_ttft_cdf(runs: list[RunSummary], path: Path, slo_ms: float) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finite_max = max((t for r in runs for t in r.ttfts_ms if math.isfinite(t)), default=1.0)
    edge = max(finite_max, slo_ms) * 1.1
    for r in runs:
        values = sorted(min(t, edge) for t in r.ttfts_ms)
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, ys, where="post", label=f"{r.target} @ {r.rate:g}/s")
    ax.axvline(slo_ms, color="red", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
    ax.axhline(0.95, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("TTFT (ms); failed or tokenless requests at the right edge")
    ax.set_ylabel("share of requests")
    ax.set_title(f"TTFT CDF — {runs[0].workload if runs else ''}")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_p95_vs_rate(runs: list[RunSummary], path: Path, slo_ms: float) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finite = [r.p95_ttft_ms() for r in runs if math.isfinite(r.p95_ttft_ms())]
    top = max(finite + [slo_ms]) * 1.5
    for target in dict.fromkeys(r.target for r in runs):
        pts = sorted((r.rate, r.p95_ttft_ms()) for r in runs if r.target == target)
        line, = ax.plot([p[0] for p in pts], [min(p[1], top) for p in pts], marker="o",
                        label=target)
        over = [p for p in pts if not math.isfinite(p[1])]
        if over:
            ax.scatter([p[0] for p in over], [top] * len(over), marker="x", s=60,
                       color=line.get_color())
    ax.axhline(slo_ms, color="red", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
    ax.set_xlabel("offered request rate (req/s)")
    ax.set_ylabel("p95 TTFT (ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_title(f"p95 TTFT vs rate — {runs[0].workload if runs else ''}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out_dir: str | Path, runs: list[RunSummary], *, slo_ms: float,
                 sweeps: list[SweepResult] | None = None, meta: dict | None = None,
                 goals_markdown: str = "", goals: list[dict] | None = None) -> dict[str, Path]:
    """Write every output file into `out_dir`; returns their paths by name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sweeps = sweeps or []
    paths: dict[str, Path] = {"markdown": out / "report.md", "json": out / "report.json"}
    for workload in dict.fromkeys(r.workload for r in runs):
        mine = [r for r in runs if r.workload == workload]
        paths[f"cdf_{workload}"] = out / f"ttft_cdf_{workload}.png"
        plot_ttft_cdf(_cdf_runs(runs, sweeps, workload), paths[f"cdf_{workload}"], slo_ms)
        paths[f"rate_{workload}"] = out / f"p95_ttft_vs_rate_{workload}.png"
        plot_p95_vs_rate(mine, paths[f"rate_{workload}"], slo_ms)
    intro = (f"TTFT SLO: p95 ≤ {slo_ms:g} ms. Latencies in ms; goodput = share of requests "
             "whose TTFT met the SLO (failures count as misses).")
    sections = ([("Goals", goals_markdown)] if goals_markdown else []) + (
        [("Sweeps", sweeps_table(sweeps))] if sweeps else []) + [("Runs", runs_table(runs))]
    parts = [f"# Headstart bench report\n\n{intro}\n"]
    if meta:
        parts.append("```\n" + json.dumps(meta, indent=1, default=str) + "\n```\n")
    parts += [f"## {heading}\n\n{markdown}\n" for heading, markdown in sections]
    parts.append("## Plots\n\n" + "\n".join(f"- `{p.name}`" for k, p in paths.items()
                                            if p.suffix == ".png") + "\n")
    paths["markdown"].write_text("\n".join(parts))
    paths["html"] = write_html(out / "report.html", intro=intro, sections=sections, meta=meta,
                               plots=[p for p in paths.values() if p.suffix == ".png"])
    document = {"meta": meta or {}, "slo_ms": slo_ms, "goals": goals or [],
                "sweeps": [s.to_dict() for s in sweeps], "runs": [r.to_dict() for r in runs]}
    paths["json"].write_text(json.dumps(document, indent=1, default=str))
    return paths
