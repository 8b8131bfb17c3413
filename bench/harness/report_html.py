"""`report.html`: the bench report as one self-contained page to open or mail around.

The same sections as `report.md` (goals, sweeps, runs: the Markdown pipe tables that
`bench/harness/report.py` writes, turned into HTML tables) and every plot inline as a PNG data URI:
no script, no stylesheet or image fetched from anywhere, so the file works on its own.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1f2328; margin: 24px auto; max-width: 1200px;
       padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f6f8fa; }
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
.scroll { overflow-x: auto; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 12px; }
figure { margin: 0; } figure img { width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: 12px; }
details pre { background: #f6f8fa; padding: 8px; overflow-x: auto; }
"""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def markdown_html(text: str) -> str:
    """Pipe tables (header, `|---|` line, rows) as HTML tables; other lines as paragraphs."""
    out: list[str] = []
    lines = text.strip().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            head = "".join(f"<th>{html.escape(c)}</th>" for c in _cells(line))
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>"
                                             for c in _cells(lines[i])) + "</tr>")
                i += 1
            out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                       f"<tbody>{''.join(rows)}</tbody></table></div>")
            continue
        if line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
        i += 1
    return "\n".join(out)


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    name = html.escape(path.name)
    return (f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>{name}</figcaption></figure>")


def write_html(path: Path, *, intro: str, sections: list[tuple[str, str]],
               plots: list[Path], meta: dict | None = None) -> Path:
    """One page: `intro`, each (heading, Markdown) section, the plots inline, the run's
    settings folded away at the end."""
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>Headstart bench report</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>Headstart bench report</h1>", markdown_html(intro)]
    for heading, markdown in sections:
        parts += [f"<h2>{html.escape(heading)}</h2>", markdown_html(markdown)]
    if plots:
        parts += ["<h2>Plots</h2>", '<div class="plots">', *map(_figure, plots), "</div>"]
    if meta:
        settings = html.escape(json.dumps(meta, indent=1, default=str))
        parts.append(f"<details><summary>Settings</summary><pre>{settings}</pre></details>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
