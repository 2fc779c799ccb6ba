"""The tooling's imports, read with `ast` (nothing is imported): no import circle among the modules of hack/,
bench/ and tests/support/, and hack/localcluster/ (which runs before the project's virtualenv exists) on the
standard library and itself only.

A module's imports are every `import` and `from ... import` in it, wherever they stand (inside a function
too: a late import still makes a circle, it only hides it until run time).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from hack.localcluster.paths import ROOT

PACKAGES = ("hack", "bench", "tests/support")
# What hack/ may import beyond the standard library and itself: the two scripts that run in the project's
# virtualenv (`make run` and the dashboard), never hack/localcluster/.
VIRTUALENV_TOOLS = {
    "hack.sample": {"yaml", "gymsandbox"},
    "hack.dashboard": {"httpx", "matplotlib"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every Python module of PACKAGES (hack/node/'s standalone files included), by dotted name."""
    return {
        module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
    }


def imported(name: str, path: Path) -> Iterator[str]:
    """The dotted names a module imports: `from a.b import c` gives `a.b.c` and `a.b` (c may be a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def graph() -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES it imports."""
    found = modules()
    return {
        name: {other for other in imported(name, path) if other in found and other != name}
        for name, path in found.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, each once, as the path that closes it (depth-first, three colours)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for other in sorted(edges.get(node, ())):
            if state.get(other) == 1:
                found.append([*path[path.index(other) :], other])
            elif other not in state:
                visit(other)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_graph_sees_the_imports_between_the_tooling_modules() -> None:
    edges = graph()
    assert "hack.localcluster.node" in edges["hack.localcluster.controlplane"]
    assert "hack.localcluster.paths" in edges["hack.localcluster.node"]
    assert "tests.support.cluster" in edges["bench.common"]


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_hack_bench_and_the_test_harness_import_in_no_circle() -> None:
    assert cycles(graph()) == []


def test_hack_imports_the_standard_library_and_itself_only() -> None:
    outside = {}
    for name, path in modules().items():
        if not name.startswith("hack"):
            continue
        allowed = VIRTUALENV_TOOLS.get(name, set())
        tops = {module.split(".")[0] for module in imported(name, path) if module}
        foreign = sorted(
            top for top in tops if top not in sys.stdlib_module_names and top != "hack" and top not in allowed
        )
        if foreign:
            outside[name] = foreign
    assert outside == {}
