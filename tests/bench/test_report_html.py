"""`report.html`: the bench report's tables as HTML and its plots inline, nothing fetched."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

from bench.harness.report import write_report
from bench.harness.report_html import markdown_html
from bench.harness.sweep import SweepResult
from tests.bench.test_report import _run


class Page(HTMLParser):
    """Tables (rows of cell texts), image sources and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(a["src"] or "")
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]
        assert tag not in ("script", "link", "iframe"), tag

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_the_page_holds_the_tables_and_the_plots(tmp_path):
    fast = [_run("headstart", r, [0.1, 0.2, 0.3]) for r in (1, 2, 4)]
    slow = [_run("llama.cpp", 1, [0.5, 0.6, 0.65]), _run("llama.cpp", 2, [0.9, 2.0, None])]
    sweeps = [SweepResult("headstart", "chat", 700, fast),
              SweepResult("llama.cpp", "chat", 700, slow)]
    paths = write_report(tmp_path, fast + slow, slo_ms=700, sweeps=sweeps, meta={"seed": 7},
                         goals_markdown="| goal | met |\n|---|---|\n| p95 <b> | yes |")
    text = paths["html"].read_text()
    page = Page()
    page.feed(text)
    goals, sweep, runs = page.tables
    assert goals == [["goal", "met"], ["p95 <b>", "yes"]]  # escaped, shown as written
    assert sweep[1][:4] == ["headstart", "chat", "4", "290"]
    assert sweep[2][:4] == ["llama.cpp", "chat", "1", "645"]
    assert len(runs) == 1 + 5 and runs[0][:3] == ["target", "workload", "rate/s"]
    assert len(page.images) == 2
    for src, png in zip(page.images, ("ttft_cdf_chat.png", "p95_ttft_vs_rate_chat.png"),
                        strict=True):
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix):]) == (tmp_path / png).read_bytes()
    assert all(url.startswith("data:") for url in page.urls)  # self-contained
    assert re.search(r"<summary>Settings</summary><pre>\{\s+&quot;seed&quot;: 7", text)


def test_lines_that_are_not_tables_become_paragraphs():
    assert markdown_html("No goals: the baseline did not run.") == \
        "<p>No goals: the baseline did not run.</p>"
