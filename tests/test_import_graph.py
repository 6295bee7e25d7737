"""The packages' imports flow one way: no module of minillm/ or practice/ imports itself in a
circle.

Every import counts, at the top of a file or inside a function: a lazy import only hides a cycle
from Python's loader, not from a reader who follows it. A package counts as its `__init__.py`; a
submodule's implicit import of its package's `__init__` does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minillm", "practice")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "problems" in path.relative_to(ROOT).parts or "workspace" in path.parts:
                continue  # the exercises are the learner's files, graded one at a time
            modules[module_name(path)] = path
    return modules


def imported_names(path: Path, name: str, is_package: bool) -> set[str]:
    """Every module name that `path` imports, resolved to absolute names (relative imports
    included)."""
    names = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            names.add(base)
            names.update(
                f"{base}.{alias.name}" for alias in node.names
            )  # `from pkg import module`
    return names


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        folder = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imported in imported_names(path, name, path.name == "__init__.py"):
            # the judge's scripts import their neighbours by bare name (their folder is on
            # sys.path)
            if (
                imported.split(".")[0] not in PACKAGES
                and f"{folder}.{imported.split('.')[0]}" in modules
            ):
                imported = f"{folder}.{imported}"
            while imported and imported not in modules:  # `a.b.func` -> the module `a.b`
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_relative_and_bare_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (tmp_path / "pkg" / "b.py").write_text("from . import a\n")
    graph = {
        "pkg.a": {"pkg.b"} & set(imported_names(tmp_path / "pkg" / "a.py", "pkg.a", False)),
        "pkg.b": {"pkg.a"} & set(imported_names(tmp_path / "pkg" / "b.py", "pkg.b", False)),
    }
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    graph = {k: v for k, v in import_graph().items() if k.split(".")[0] == package}
    found = cycles(graph)
    assert not found, "modules that import each other in a circle: " + "; ".join(
        " <-> ".join(c) for c in found
    )
