"""Every third-party package the product imports is one its `pyproject.toml` declares, so that
an install from the declaration alone runs it, and nothing works only because another
dependency happens to pull it in (docs/deployment.md). The Python client's modules are checked
against the client's own declaration (clients/python/pyproject.toml) in the same way."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("config", "console", "demo", "dispatch", "protocols")
CLIENT = ROOT / "clients" / "python"


def imported_top_levels(folder: Path) -> set[str]:
    """The top-level names of the absolute imports in every module below `folder`, but those
    under `if TYPE_CHECKING:` (never run)."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(inner) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def declared(pyproject: Path, *extras: str) -> set[str]:
    """The normalized distribution names of the project's dependencies and of `extras`."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project.get("dependencies", []))
    for extra in extras:
        requirements += project.get("optional-dependencies", {}).get(extra, [])
    return {normalize(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])
            for requirement in requirements}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def undeclared(modules: set[str], ours: set[str], allowed: set[str]) -> list[str]:
    """The imported third-party modules none of whose distributions is in `allowed`."""
    distributions = packages_distributions()
    missing = []
    for module in sorted(modules - ours - set(sys.stdlib_module_names)):
        found = {normalize(name) for name in distributions.get(module, [])}
        if not found & allowed:
            missing.append(f"{module} (from {sorted(found) or 'nothing installed'})")
    return missing


#: A package whose imports may also come from one extra: the demo extension installs `demo`.
EXTRAS = {"demo": ("demo",)}


@pytest.mark.parametrize("package", PRODUCT)
def test_the_product_imports_only_what_it_declares(package: str) -> None:
    ours = {*PRODUCT, "exact_console"}  # the client: the demo's destinations use it
    assert undeclared(imported_top_levels(ROOT / package), ours,
                      declared(ROOT / "pyproject.toml", *EXTRAS.get(package, ()))) == []


def test_the_clients_permit_verifier_imports_only_its_extra() -> None:
    modules = imported_top_levels(CLIENT / "exact_console") & {"jwt", "rfc8785", "cryptography"}
    assert modules  # the verifier imports some of them
    assert undeclared(modules, {"exact_console"},
                      declared(CLIENT / "pyproject.toml", "permits")) == []
