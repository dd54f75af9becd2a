"""No import cycles among our modules, and benchmarks that import nothing from the unit tests.

Every import counts, also one inside a function or under `if TYPE_CHECKING:`: a cycle broken by a late
import is still two modules that each need the other to be understood, and the late import is where the
next change breaks. `from package import module` is an edge to that module (not to the package's
`__init__`, which Python runs first but which is not what the importer uses).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "manager", "scheduler_plugin", "common", "bench")


def _modules() -> dict[str, Path]:
    """Our Python modules by dotted name; a C extension is known by its stub (`_cgread.pyi`), imports nothing."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted([*(REPO / package).rglob("*.py"), *(REPO / package).rglob("*.pyi")]):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join(parts), path)
    return found


def _imported(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every import statement, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            yield base, [alias.name for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.suffix == ".py" else ast.Module([], [])
        for target, names in _imported(tree, name, path.name == "__init__.py"):
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            if submodules:
                edges.update(submodules)
            if target in modules and len(submodules) < len(names or [None]):
                edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next((e for e in edges if e in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_bench_imports_nothing_from_the_unit_tests() -> None:
    offenders = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target, _ in _imported(tree, "bench", is_package=True):
            if target == "tests.unit" or target.startswith("tests.unit."):
                offenders.append(f"{path.relative_to(REPO)}: {target}")
    assert offenders == []
