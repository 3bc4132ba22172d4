"""Every state change goes through its record kind's one owner (DESIGN §3, STYLE: one function
that moves each record kind's state): no other module of ours writes a `state` column."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {
    "dispatch/services/operations.py",   # Operation: operation_move, the attempts' rows
    "dispatch/services/permits.py",      # Permit: permit_move
    "dispatch/services/approvals.py",    # ApprovalRequest: approval_move, approval_open
    "dispatch/services/resources.py",    # Resource: resource_move (and the initial state)
    "dispatch/services/executions.py",   # Execution: execution_set_state
    "dispatch/services/renewals.py",     # Renewal: _move (and the initial state)
}


def _writes_state(call: ast.Call) -> bool:
    """`.update(state=…)`, `.create(state=…)`, `.update(**fields)`, or a save of `state`."""
    if not isinstance(call.func, ast.Attribute):
        return False
    method = call.func.attr
    if method in ("update", "create", "get_or_create", "update_or_create", "bulk_create"):
        return any(k.arg == "state" or k.arg is None for k in call.keywords) and not (
            method == "update" and isinstance(call.func.value, ast.Name)
            and call.func.value.id in ("fields", "counts", "details"))
    if method == "save":
        for keyword in call.keywords:
            if keyword.arg == "update_fields" and "state" in ast.unparse(keyword.value):
                return True
    return False


def _writers() -> list[str]:
    found = []
    for path in sorted([*ROOT.glob("dispatch/**/*.py"), *ROOT.glob("console/**/*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative or relative in OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Call) and _writes_state(node):
                found.append(f"{relative}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_the_owners_writes_a_state_column() -> None:
    assert _writers() == []


def _sql_writers() -> list[str]:
    """The fixed SQL of the hot path (dispatch.services.statements): a string constant that
    sets a `state` column belongs to its record kind's owner too."""
    found = []
    for path in sorted(ROOT.glob("dispatch/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative or relative in OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and 'SET "state"' in node.value:
                found.append(f"{relative}:{node.lineno}")
    return found


def test_no_module_but_the_owners_holds_sql_that_sets_a_state() -> None:
    assert _sql_writers() == []


def test_the_scan_sees_a_state_write(tmp_path: Path) -> None:
    """The scan itself: a direct write of a state column is found."""
    call = ast.parse("Operation.objects.filter(id=x).update(state='completed')").body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert _writes_state(call.value)
    saved = ast.parse("op.save(update_fields=['state'])").body[0]
    assert isinstance(saved, ast.Expr) and isinstance(saved.value, ast.Call)
    assert _writes_state(saved.value)


#: Who may start an attempt (DESIGN §5): the first is the claim's (`attempt_start`), every one
#: after it `attempt_next`'s, which checks again what the claim checked.
ATTEMPT_STARTERS = {"attempt_open": {"dispatch/services/operations.py:attempt_start",
                                      "dispatch/services/attempts.py:attempt_next"},
                    "attempt_start": {"dispatch/services/execution.py:_next_attempt"}}


def _callers(name: str) -> set[str]:
    found = set()
    for path in sorted([*ROOT.glob("dispatch/**/*.py"), *ROOT.glob("demo/**/*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), relative)
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and name in (
                        getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                    found.add(f"{relative}:{function.name}")
    return found


def test_one_function_starts_every_attempt_after_the_first() -> None:
    for name, allowed in ATTEMPT_STARTERS.items():
        assert _callers(name) == allowed, name
