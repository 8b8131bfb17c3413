"""The replay's figures: per stream and judge, hit rate and wrong-hit rate against the number
of requests, as a PNG (two panels, one line per judge), JSON and a Markdown table.

The hit rate is over the same-answer askings (a wording of the asking's meaning was asked
before, so a hit can be right): right hits / same-answer askings. Wrong hits are answers
served for another meaning, given as a share of the hits served (how often a served answer
is wrong) and of all requests. Curves are per tenth of the stream; the table gives the
second half of the stream (the goal's window) and the whole.
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WINDOWS = 10
LABELS = {"none": "no judge", "agreement": "agreement (bundled model's answers)",
          "upstream": "judge upstream: bundled 135M model (weak)",
          "oracle": "oracle: reads the labels (ceiling, not a result)"}


@dataclass(frozen=True)
class Step:
    """One asking of the replay."""

    same_answer: bool  # a wording of its meaning was asked before
    served: bool
    right: bool  # served its meaning's answer
    status: str  # exact | semantic | miss
    judged: str | None = None  # a grey-zone miss: what its judgement became


def summary(steps: list[Step]) -> dict[str, Any]:
    """Counts and rates over `steps`."""
    hits = sum(s.served for s in steps)
    right = sum(s.right for s in steps)
    wrong = hits - right
    same = sum(s.same_answer for s in steps)
    judged: dict[str, int] = {}
    for s in steps:
        if s.judged:
            judged[s.judged] = judged.get(s.judged, 0) + 1
    return {"requests": len(steps), "same_answer": same, "hits": hits, "right_hits": right,
            "wrong_hits": wrong, "hit_rate": round(right / same, 4) if same else 0.0,
            "wrong_of_hits": round(wrong / hits, 4) if hits else 0.0,
            "wrong_per_request": round(wrong / len(steps), 4) if steps else 0.0,
            "judged": judged}


def curve(steps: list[Step], windows: int = WINDOWS) -> list[dict[str, Any]]:
    """`summary` of each tenth of the stream, with the number of requests at its end
    (`until`)."""
    size = max(1, len(steps) // windows)
    return [{"until": min(i + size, len(steps)), **summary(steps[i:i + size])}
            for i in range(0, len(steps) - size + 1, size)]


def plot(stream: str, arms: dict[str, list[Step]], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for judge, steps in arms.items():
        points = curve(steps)
        xs = [p["until"] for p in points]
        style = "--" if judge == "oracle" else "-"
        left.plot(xs, [100 * p["hit_rate"] for p in points], style, marker="o",
                  label=LABELS.get(judge, judge))
        right.plot(xs, [100 * p["wrong_of_hits"] for p in points], style, marker="o",
                   label=LABELS.get(judge, judge))
    left.set(title=f"{stream}: hits of same-answer askings", xlabel="requests",
             ylabel="% of same-answer askings, per tenth of the stream", ylim=(0, 100))
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    right.set(title=f"{stream}: wrong hits", xlabel="requests",
              ylabel="% of hits served, per tenth of the stream")
    right.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict[str, dict[str, list[Step]]], seconds: dict[str, dict[str, float]]) -> str:
    lines = ["| stream | judge | 2nd half: hits of same-answer askings | wrong, of hits | "
             "wrong, of requests | whole: hits | wrong, of hits | promoted | refused | s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for stream, arms in results.items():
        for judge, steps in arms.items():
            late, whole = summary(steps[len(steps) // 2:]), summary(steps)
            lines.append(
                f"| {stream} | {LABELS.get(judge, judge)} | {_rate(late, 'hit_rate', 'right_hits', 'same_answer')} | "
                f"{_rate(late, 'wrong_of_hits', 'wrong_hits', 'hits')} | "
                f"{_rate(late, 'wrong_per_request', 'wrong_hits', 'requests')} | "
                f"{_rate(whole, 'hit_rate', 'right_hits', 'same_answer')} | "
                f"{_rate(whole, 'wrong_of_hits', 'wrong_hits', 'hits')} | "
                f"{whole['judged'].get('promoted', 0)} | {whole['judged'].get('refused', 0)} | "
                f"{seconds.get(stream, {}).get(judge, 0):g} |")
    return "\n".join(lines)


def _rate(found: dict[str, Any], rate: str, k: str, n: str) -> str:
    return f"{100 * found[rate]:.1f}% ({found[k]}/{found[n]})"


def write_report(out: Path, results: dict[str, dict[str, list[Step]]],
                 seconds: dict[str, dict[str, float]], args: dict[str, Any]) -> str:
    """replay.json, replay.md and replay_<stream>.png under `out`; returns the table."""
    out.mkdir(parents=True, exist_ok=True)
    for stream, arms in results.items():
        plot(stream, arms, out / f"replay_{stream}.png")
    text = table(results, seconds)
    (out / "replay.md").write_text(text + "\n")
    runs = {stream: {judge: {"second_half": summary(steps[len(steps) // 2:]),
                             "whole": summary(steps), "curve": curve(steps),
                             "steps": [list(astuple(s)) for s in steps]}
                     for judge, steps in arms.items()} for stream, arms in results.items()}
    data = {"args": args, "seconds": seconds, "step_fields": [f.name for f in fields(Step)],
            "results": runs}
    (out / "replay.json").write_text(json.dumps(data))
    return text
