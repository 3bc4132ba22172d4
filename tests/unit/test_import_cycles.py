"""No import circle among our modules, lazy or not.

The graph is read from the source with `ast`, so an import inside a function counts as much as
one at the top of a module: a cycle hidden behind a function-level import still means neither
module can be understood, tested or moved without the other. Every import statement counts
(module level, class body, function body, `if TYPE_CHECKING:`), relative ones included, and so
does `importlib.import_module("literal")`.

Resolution: `import a.b.c` imports module `a.b.c`; `from a.b import c` imports the submodule
`a.b.c` when there is one, else the package `a.b` (its `__init__`); importing a package imports
its `__init__`. Running a submodule also runs its parent packages' `__init__`, but that is
Python's loading order, not a dependency of the submodule, so it is no edge (otherwise every
package whose `__init__` re-exports its submodules would be a circle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocols", "dispatch", "console", "demo", "config", "bench")

Graph = dict[str, set[str]]


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of `packages` under `root`, by dotted name (a package by its `__init__`)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    """The package a relative import in `module` starts from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _ours(name: str, modules: Mapping[str, Path]) -> str | None:
    """`name` if it is one of our modules, else its longest prefix that is, else None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _absolute(module: str, path: Path, level: int, name: str | None) -> str:
    base = _package_of(module, path)
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return ".".join(part for part in (base, name) if part)


def _import_module_literal(node: ast.Call) -> tuple[str, str | None] | None:
    """(name, package) of `importlib.import_module("x")` / `import_module("x")`, else None."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in {"import_module", "__import__"} or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    package = None
    for keyword in node.keywords:
        if keyword.arg == "package" and isinstance(keyword.value, ast.Constant):
            package = str(keyword.value.value)
    if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
        package = str(node.args[1].value)
    return first.value, package


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """Our modules that `module` imports anywhere in its body."""
    targets: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(_ours(alias.name, modules) or "")
        elif isinstance(node, ast.ImportFrom):
            source = (
                _absolute(module, path, node.level, node.module) if node.level else node.module
            ) or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else _ours(source, modules) or "")
        elif isinstance(node, ast.Call) and (literal := _import_module_literal(node)):
            name, package = literal
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                anchor = package or _package_of(module, path)
                for _ in range(level - 1):
                    anchor = anchor.rpartition(".")[0]
                name = f"{anchor}.{name.lstrip('.')}".rstrip(".")
            targets.add(_ours(name, modules) or "")
    targets.discard("")
    targets.discard(module)
    return targets


def import_graph(root: Path, packages: Iterable[str]) -> Graph:
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
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
                    components.append(sorted(component))
    return components


def _one_cycle(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle through the first module of a strongly connected component."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {start} in {component}")  # pragma: no cover


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component, each as a path back to its start."""
    return [_one_cycle(graph, component) for component in _strongly_connected(graph)]


def _describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


# --- The walker itself, on planted packages -------------------------------------------------


def _plant(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_function_level_cycle_is_caught(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg import a\n    return a\n",
    })
    assert import_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.a"]]


@pytest.mark.parametrize("spelling", [
    "from .. import a",
    "from ..a import thing",
    "import pkg.a",
    "import pkg.a as alias",
    "from pkg import a as alias",
    "import importlib\n    importlib.import_module('pkg.a')",
    "from importlib import import_module\n    import_module('..a', package='pkg.sub')",
])
def test_every_spelling_of_an_import_is_an_edge(tmp_path: Path, spelling: str) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.sub.b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": f"def lazy():\n    {spelling}\n",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_a_package_and_its_submodule_importing_it_back_is_a_cycle(tmp_path: Path) -> None:
    """The shape this test was written against: `models/__init__` ↔ `models/delegations`."""
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/models/__init__.py": "class Base: ...\nfrom pkg.models.extra import Extra\n",
        "pkg/models/extra.py": "from pkg.models import Base\nclass Extra(Base): ...\n",
    })
    cycles = import_cycles(import_graph(tmp_path, ["pkg"]))
    assert cycles == [["pkg.models", "pkg.models.extra", "pkg.models"]]


def test_a_package_reexporting_a_base_module_is_no_cycle(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/models/__init__.py": (
            "from pkg.models.base import Base\nfrom pkg.models.extra import Extra\n"
        ),
        "pkg/models/base.py": "class Base: ...\n",
        "pkg/models/extra.py": "from pkg.models.base import Base\nclass Extra(Base): ...\n",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.models"] == {"pkg.models.base", "pkg.models.extra"}
    assert import_cycles(graph) == []


def test_imports_of_other_packages_are_not_edges(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "import os\nfrom django.db import models\nfrom pkg import missing\n",
    })
    assert import_graph(tmp_path, ["pkg"]) == {"pkg": set()}


# --- Our packages ---------------------------------------------------------------------------


def test_the_walk_sees_our_packages() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert {"dispatch.models", "dispatch.services", "console.views", "protocols"} <= set(graph)
    assert "protocols.lifecycle" in graph["dispatch.models.base"]
    assert "dispatch.models.base" in graph["dispatch.models.delegations"]


def test_our_packages_have_no_import_cycle() -> None:
    cycles = import_cycles(import_graph(ROOT, PACKAGES))
    assert cycles == [], "import cycles:\n" + _describe(cycles)
