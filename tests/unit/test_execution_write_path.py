"""Only `dispatch.services.executions` writes `Execution` and `TranscriptEntry` rows.

An AST scan of every module of the project: a write is a call of a queryset or manager write
method (`create`, `update`, `save`, `delete`, `bulk_create`, ...) whose receiver is reached from
one of the two models (`Execution.objects.filter(...).update(...)`), from an execution's
`entries`, or from a variable named for one of them (`execution.save(...)`); constructing
either model counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "dispatch" / "services" / "executions.py"
PACKAGES = ("dispatch", "console", "config", "demo", "scripts", "bench")
MODELS = frozenset({"Execution", "TranscriptEntry"})
RELATED = frozenset({"entries"})  # Execution -> TranscriptEntry
WRITES = frozenset({"create", "update", "save", "delete", "bulk_create", "bulk_update",
                    "get_or_create", "update_or_create"})


def _names(node: ast.expr) -> list[str]:
    """The names along a receiver chain: `a.b(...).c` gives ["a", "b", "c"]."""
    found: list[str] = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            if isinstance(node, ast.Name):
                found.append(node.id)
            return found[::-1]


def _writes_a_model(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in MODELS
    if not isinstance(func, ast.Attribute):
        return False
    if isinstance(func.value, ast.Name) and func.attr in MODELS:  # models.Execution(...)
        return True
    if func.attr not in WRITES:
        return False
    chain = _names(func.value)
    if MODELS & set(chain) or RELATED & set(chain):
        return True
    return bool(chain) and any(word in chain[-1].lower() for word in ("execution", "entry"))


def writes_in(source: str) -> list[int]:
    """Line numbers of the writes of either model in `source`."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and _writes_a_model(node))


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                  if "migrations" not in path.parts)


def test_no_module_but_executions_writes_an_execution_or_its_journal() -> None:
    found = {str(path.relative_to(ROOT)): lines for path in _modules() if path != OWNER
             if (lines := writes_in(path.read_text()))}
    assert found == {}


def test_the_scan_sees_the_writes_it_forbids() -> None:
    assert len(writes_in(OWNER.read_text())) >= 4  # create, set_state, append (entry, touch)
    sample = "\n".join([
        "Execution.objects.create(state='running')",
        "Execution.objects.filter(id=x).update(state='waiting')",
        "TranscriptEntry.objects.bulk_create([])",
        "execution.entries.create(seq=1)",
        "execution.save(update_fields=['state'])",
        "models.TranscriptEntry(seq=1)",
        "Execution.objects.filter(id=x).first()",  # a read
        "Operation.objects.filter(id=x).update(state='claimed')",  # another model
    ])
    assert writes_in(sample) == [1, 2, 3, 4, 5, 6]
