"""Dependencies point one way (DESIGN.md, "The shape"), at every depth.

Every `import` of the project's packages (PACKAGES) is read with `ast`,
wherever it stands: at the top, inside a function, under `if TYPE_CHECKING:`. An import
inside a function still ties the two modules together, so it counts. Importing `a.b.c`
also runs the package `a.b`'s `__init__`, so it counts as importing `a.b` too (unless the
importer lives in `a.b` itself). On that graph:

- no module imports one that imports it back, at any depth (the test names the circle);
- the engine imports none of gateway/, cache/, prompts/; cache/ and prompts/ never import
  gateway/; prompts/ never imports cache/; product code never imports bench/ or training/;
- bench/, training/ and tests/ do not ship in the package.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("openai_api", "cpu_kernels", "engine", "gateway", "cache", "prompts", "bench",
            "training")

# Imports allowed to close a circle, each with the reason: none today. Keep it that way.
KNOWN_CIRCLES: dict[tuple[str, str], str] = {}

# (importer's package, packages it must not import)
FORBIDDEN = [
    ("openai_api", {"cpu_kernels", "engine", "gateway", "cache", "prompts", "bench", "training"}),
    ("cpu_kernels", {"openai_api", "engine", "gateway", "cache", "prompts", "bench", "training"}),
    ("engine", {"gateway", "cache", "prompts", "bench", "training"}),
    ("cache", {"gateway", "bench", "training"}),
    ("prompts", {"gateway", "cache", "bench", "training"}),
    ("gateway", {"bench", "training"}),
    ("training", {"gateway", "bench"}),  # it reads cache/; nothing at serving time reads it
]

# (package, the importers that may reach it only through its public interface, its
# `__init__`): the gateway holds the engine by its typed interface, never its internals; the
# cache's encoder uses the kernels as the engine's model does, by `cpu_kernels`' interface
# (the engine also packs its weights in the kernels' layouts, cpu_kernels/*_blocks.py)
PUBLIC_ONLY = [
    ("engine", {"gateway", "cache", "prompts"}),
    ("cpu_kernels", {"cache"}),
]


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # the project module it names (or a package whose __init__ it runs)
    line: int
    named: str  # the module as the import statement names it

    def __str__(self) -> str:
        path = module_paths()[self.importer].relative_to(ROOT)
        return f"{self.importer} -> {self.imported} ({path}:{self.line})"


@cache
def module_paths() -> dict[str, Path]:
    """Every project module by dotted name (a package by its `__init__.py`)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _project_module(name: str) -> str | None:
    """The project module `name` is, or is inside of (an object imported from it)."""
    modules = module_paths()
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _named_modules(module: str, is_package: bool, node: ast.Import | ast.ImportFrom
                   ) -> list[str]:
    """The dotted names one import statement asks for."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importer's package
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def imports_in(module: str, source: str, is_package: bool = False) -> list[Import]:
    """The imports of project modules in `module`'s source, with the packages whose
    `__init__` each one runs."""
    own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for name in _named_modules(module, is_package, node):
            target = _project_module(name)
            if target is None or target == module:
                continue
            parts = target.split(".")
            ran = {".".join(parts[:i]) for i in range(1, len(parts) + 1)} - own
            found += [Import(module, t, node.lineno, target) for t in sorted(ran)
                      if t in module_paths()]
    return found


@cache
def imports() -> list[Import]:
    """Every import between project modules."""
    return [imp for module, path in module_paths().items()
            for imp in imports_in(module, path.read_text(), path.name == "__init__.py")]


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """Some circle `a, b, ..., a` in the graph, or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (circle := visit(start)):
            return circle
    return None


def graph(skip: set[tuple[str, str]]) -> tuple[dict[str, set[str]], dict[tuple, Import]]:
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], Import] = {}
    for imp in imports():
        if (imp.importer, imp.named) not in skip:
            edges[imp.importer].add(imp.imported)
            where.setdefault((imp.importer, imp.imported), imp)
    return edges, where


SOURCE = """
from typing import TYPE_CHECKING

from . import window
from openai_api.errors import APIError

if TYPE_CHECKING:
    from gateway.config import RouteConfig

def later():
    import cache.keys
"""


def test_every_kind_of_import_is_seen():
    found = {(i.imported, i.line) for i in imports_in("prompts.example", SOURCE)}
    assert found == {("prompts.window", 4),  # relative; prompts/__init__ is its own package
                     ("openai_api", 5), ("openai_api.errors", 5),  # and the package
                     ("gateway", 8), ("gateway.config", 8),  # under TYPE_CHECKING
                     ("cache", 11), ("cache.keys", 11)}  # inside a function


def test_a_circle_is_found_and_named_in_order():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_module_imports_one_that_imports_it_back():
    edges, where = graph(set(KNOWN_CIRCLES))
    circle = find_circle(edges)
    assert circle is None, "an import circle:\n  " + "\n  ".join(
        str(where[a, b]) for a, b in zip(circle, circle[1:], strict=False))


def test_every_known_circle_is_still_there():
    present = {(i.importer, i.named) for i in imports()}
    gone = sorted(set(KNOWN_CIRCLES) - present)
    assert not gone, f"these imports are gone: delete them from KNOWN_CIRCLES: {gone}"


def test_dependencies_point_one_way():
    wrong = [str(imp) for imp in imports()
             for package, forbidden in FORBIDDEN
             if imp.importer.split(".")[0] == package
             and imp.imported.split(".")[0] in forbidden]
    assert wrong == []


def test_other_packages_use_only_the_public_interfaces():
    wrong = [str(imp) for imp in imports()
             for package, importers in PUBLIC_ONLY
             if imp.importer.split(".")[0] in importers
             and imp.imported.split(".")[0] == package and imp.imported != package]
    assert wrong == []


def test_development_trees_do_not_ship():
    """bench/, training/ and tests/ run from a checkout; the package carries product code."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = [tree for tree in ("bench", "training", "tests")
               if any(fnmatch(tree, pattern) for pattern in include)]
    assert shipped == []
