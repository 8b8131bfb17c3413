"""The documentation: a short README that starts with the two set-up commands, no link that
leaves the repository, no relative link to a file or heading that is not there, and every
key of the config file documented in docs/config.md. Reads text only: no model loads."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from pydantic import BaseModel

from engine import EngineConfig
from gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIG_PAGE = DOCS / "config.md"
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
# set by the upstream's own `path` and `model`, not under `engine:`
ENGINE_KEYS_SET_ELSEWHERE = {"model", "model_name"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^\s<>]*)>")
HTML_ATTR = re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
BARE_URL = re.compile(r"(?:\b[A-Za-z][A-Za-z0-9+.-]*://|\bwww\.)[^\s<>()\[\]\"'`]+")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def markdown_files() -> list[Path]:
    """Every markdown file of the repository (not the virtualenvs, build or tool folders)."""
    skip = {"node_modules", "build", "dist"}
    found = []
    for path in ROOT.rglob("*.md"):
        parts = path.relative_to(ROOT).parts[:-1]
        if any(p.startswith(".") or p in skip or p.endswith(".egg-info") for p in parts):
            continue
        found.append(path)
    return sorted(found)


def without_code(text: str) -> str:
    """The prose of a markdown text: fenced blocks and code spans removed (what they hold
    is shown as code, never rendered as a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def link_targets(text: str) -> list[str]:
    """The targets of every link and image in a markdown text, in order."""
    prose = without_code(text)
    targets = []
    for pattern in (INLINE_LINK, REFERENCE, AUTOLINK, HTML_ATTR):
        targets += [m.group(1) for m in pattern.finditer(prose)]
    return targets


def leaves_repository(target: str) -> bool:
    """Whether a link target or URL points to another site or scheme. http(s) to localhost
    or 127.0.0.1 is an example of a running server, not a link out. (A relative path above
    the repository's root is `broken_links`'s to find.)"""
    if target.startswith("//"):
        return True
    if not SCHEME.match(target) and not target.lower().startswith("www."):
        return False
    parts = urlsplit(target if "://" in target else "http://" + target)
    return parts.scheme.lower() not in ("http", "https") or parts.hostname not in LOCAL_HOSTS


def outside_links(text: str) -> list[str]:
    """Links and bare URLs in the prose that leave the repository."""
    prose = without_code(text)
    found = [t for t in link_targets(text) if leaves_repository(t)]
    for url in (u.rstrip(".,;:!?") for u in BARE_URL.findall(prose)):
        if leaves_repository(url) and url not in found:  # a link's target is found once
            found.append(url)
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a markdown text's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for m in HEADING.finditer(FENCE.sub("", text)):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(text: str, page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of `text` (read as `page`) whose file is missing, lies outside `root`,
    or has no heading for the link's anchor."""
    broken = []
    for target in link_targets(text):
        if SCHEME.match(target) or target.startswith("//") or target.lower().startswith("www."):
            continue  # links out are test_no_link_leaves_the_repository's
        path_part, _, anchor = target.partition("#")
        if not path_part:
            if unquote(anchor).lower() not in anchors(text):
                broken.append(f"{target} (no such heading)")
            continue
        dest = (page.parent / unquote(path_part)).resolve()
        if not dest.is_relative_to(root.resolve()):
            broken.append(f"{target} (outside the repository)")
        elif not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md":
            if unquote(anchor).lower() not in anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{target} (no such heading)")
    return broken


def models_in(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models inside a field's type (`list[X]`, `dict[str, X]`, `X | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from models_in(arg)


def config_keys(model: type[BaseModel], seen: set[type[BaseModel]] | None = None,
                ) -> Iterator[tuple[str, str]]:
    """(model.field, YAML key) for every field of `model` and the models nested in it."""
    seen = set() if seen is None else seen
    seen.add(model)
    for name, field in model.model_fields.items():
        yield f"{model.__name__}.{name}", field.alias or name
        for sub in models_in(field.annotation):
            if sub not in seen:
                yield from config_keys(sub, seen)


def code_words(text: str) -> set[str]:
    """Every identifier written as code (code spans and fenced blocks) in a markdown text."""
    code = " ".join(m.group(0) for m in FENCE.finditer(text))
    code += " ".join(m.group(2) for m in CODE_SPAN.finditer(FENCE.sub("", text)))
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))


# --- the checks themselves, on small texts: each must be able to fail ---

def test_outside_links_finds_links_to_other_sites_and_keeps_local_examples() -> None:
    text = ("See [the site](https://example.org/page), <http://example.net>, "
            "https://bare.example.com/x, www.example.com, [mail](mailto:a@b.c) and "
            '<a href="https://html.example.org">x</a>; but [local](http://localhost:8000/v1), '
            "http://127.0.0.1:8000/v1, `https://in.code.span` and\n\n```\nhttps://in.fence\n```\n")
    assert outside_links(text) == [
        "https://example.org/page", "mailto:a@b.c", "http://example.net",
        "https://html.example.org", "https://bare.example.com/x", "www.example.com",
    ]


def test_broken_links_finds_missing_files_headings_and_paths_above_the_root(
        tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "api.md").write_text("# API\n\n## Errors\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("# Outside\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    text = ("# Page\n[ok](api.md) [ok](api.md#errors) [ok](#page) [ok](../outside.md) "
            "[gone](no-such-page.md) [bad anchor](api.md#no-such-heading) [here](#nowhere) "
            "[above](../../etc/passwd) `[in code](missing.md)`")
    assert broken_links(text, page, root=tmp_path) == [
        "no-such-page.md (no such file)", "api.md#no-such-heading (no such heading)",
        "#nowhere (no such heading)", "../../etc/passwd (outside the repository)",
    ]


def test_slug_follows_github_anchors() -> None:
    assert slug("Fleet: several engine replicas") == "fleet-several-engine-replicas"
    assert slug("`headstart eval-cache`") == "headstart-eval-cache"
    assert slug("TTFT SLO comparison (`make bench`)") == "ttft-slo-comparison-make-bench"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_config_keys_walks_nested_models() -> None:
    keys = dict(config_keys(GatewayConfig))
    assert keys["GatewayConfig.upstreams"] == "upstreams"
    assert keys["ApiKey.tenant"] == "tenant"  # list[ApiKey] inside AuthConfig
    assert keys["RateLimits.rpm"] == "rpm"  # dict[str, RateLimits]
    assert keys["EndpointEntry.url"] == "url"  # list[str | EndpointEntry]
    assert keys["SemanticPolicy.verifier_threshold"] == "verifier_threshold"  # routes[].cache


# --- the repository's docs ---

def test_readme_is_a_front_door_of_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move reference to docs/"


def test_readme_starts_with_make_serve_and_make_test() -> None:
    top = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    assert "make serve" in top and "make test" in top


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_link_leaves_the_repository(page: Path) -> None:
    assert outside_links(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings_that_exist(page: Path) -> None:
    assert broken_links(page.read_text(encoding="utf-8"), page) == []


def test_every_config_key_is_in_docs_config() -> None:
    documented = code_words(CONFIG_PAGE.read_text(encoding="utf-8"))
    missing = [where for where, key in config_keys(GatewayConfig) if key not in documented]
    assert missing == [], "document these config keys in docs/config.md"


def test_every_engine_setting_is_in_docs_config() -> None:
    documented = code_words(CONFIG_PAGE.read_text(encoding="utf-8"))
    names = {f.name for f in dataclasses.fields(EngineConfig)} - ENGINE_KEYS_SET_ELSEWHERE
    assert sorted(names - documented) == [], "document these `engine:` settings in docs/config.md"
