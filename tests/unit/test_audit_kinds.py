"""The console's audit filter offers every kind of event the runtime writes."""

from __future__ import annotations

import ast
from pathlib import Path

from dispatch.selectors.audit import AUDIT_KINDS
from protocols.audit_kinds import OPERATION_EVENT_KINDS

ROOT = Path(__file__).resolve().parents[2]


def _written_kinds() -> set[str]:
    """Every `kind="x.y"` literal in our code, and every "x.y" literal handed to `_audit`."""
    found: set[str] = set()
    for path in ROOT.glob("dispatch/**/*.py"):
        if "/migrations/" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            values = [k.value for k in node.keywords if k.arg == "kind"]
            if isinstance(node.func, ast.Name) and node.func.id == "_audit":
                values += node.args[1:2]
            for value in values:
                for constant in ast.walk(value):
                    if isinstance(constant, ast.Constant) and isinstance(constant.value, str) \
                            and "." in constant.value:
                        found.add(constant.value)
    return found


def test_every_kind_written_is_offered_by_the_filter() -> None:
    written = _written_kinds() | set(OPERATION_EVENT_KINDS.values())
    assert {"renewal.granted", "approval.granted", "proposal.created"} <= written  # the scan sees
    assert written - AUDIT_KINDS == set()
