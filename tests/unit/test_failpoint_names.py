"""`dispatch.failpoints.POINTS` is the list of failpoints the code passes, no more, no less: a
test that pauses at a name nothing passes would wait out its timeout instead of failing."""

from __future__ import annotations

import ast
from pathlib import Path

from dispatch.failpoints import POINTS

ROOT = Path(__file__).resolve().parents[2]


def _passed(path: Path) -> set[str]:
    return {
        node.args[0].value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in ("failpoint", "failpoint_payload")
        and node.args and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def test_every_listed_failpoint_is_passed_and_every_passed_one_listed() -> None:
    passed = set().union(*(_passed(path) for package in ("dispatch", "demo", "console")
                           for path in (ROOT / package).rglob("*.py")))
    assert passed == POINTS
