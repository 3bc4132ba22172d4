"""Consumed-permit tombstones are kept (docs/design.md#outcomes, docs/compatibility.md "Retention"):
no code of the runtime, the console or the demo deletes rows, and the database refuses to delete a
proposal's permit, operation or attempts out from under it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.db import models

from dispatch.models import ApprovalRequest, Attempt, Decision, Operation, Permit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dispatch", "console", "demo", "config", "protocols")
#: The only deletes allowed: the login throttle's slots in the shared cache (console/login.py).
CACHE = "caches["


def _deletes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("delete", "_raw_delete", "bulk_delete") \
                and not ast.unparse(node.func.value).startswith(CACHE):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "delete from" in node.value.lower():
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: SQL DELETE")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_deletes_rows(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    assert [line for path in files for line in _deletes(path)] == []


@pytest.mark.parametrize("model", [ApprovalRequest, Decision, Permit, Operation, Attempt])
def test_every_link_of_an_action_protects_what_it_points_at(model: type[models.Model]) -> None:
    links = [f for f in model._meta.get_fields()
             if isinstance(f, models.ForeignKey) and f.concrete]
    assert links
    assert {f.name: f.remote_field.on_delete for f in links} == {
        f.name: models.PROTECT for f in links}
