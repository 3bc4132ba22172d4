"""One `Role`: `protocols.roles.Role`; the store's role column and the console read it."""

from __future__ import annotations

import ast
from pathlib import Path

from dispatch.models import Principal
from protocols.roles import Role

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocols", "dispatch", "console", "demo", "config")


def test_role_is_declared_once() -> None:
    declared = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name == "Role"
    ]
    assert declared == ["protocols/roles.py"]


def test_the_role_column_holds_the_roles_or_none() -> None:
    field = Principal._meta.get_field("role")
    assert [value for value, _ in field.choices or ()] == ["", *Role]
