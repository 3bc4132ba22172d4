"""A workflow run's refusals are denial codes of the catalogue (`protocols.denials`).

`WorkflowRefused` takes a `DenialCode` and turns anything else into a `ValueError`; every place
that raises it names a member of the catalogue, which the source is read for here, so a code
spelled as a free string fails before any run reaches it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.drainage import get_override

from dispatch.api.serializers import error_serializer
from dispatch.workflows import WorkflowRefused
from protocols.denials import WORKFLOW_ONLY, DenialCode

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocols", "dispatch", "console", "demo", "config")


def _raised_codes(path: Path) -> list[tuple[int, str | None]]:
    """(line, member name) of each `WorkflowRefused(...)` call in `path`; None where the code
    is not spelled `DenialCode.<MEMBER>` (a string, a variable, a `.value`)."""
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "WorkflowRefused"):
            continue
        code = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "code"), None)
        member = (code.attr if isinstance(code, ast.Attribute) and isinstance(code.value, ast.Name)
                  and code.value.id == "DenialCode" else None)
        found.append((node.lineno, member))
    return found


def _every_raise() -> list[tuple[str, int, str | None]]:
    return [
        (str(path.relative_to(ROOT)), line, member)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, member in _raised_codes(path)
    ]


def test_every_code_workflow_refused_is_raised_with_is_in_the_catalogue() -> None:
    raises = _every_raise()
    assert len(raises) >= 10, "the walk found too few WorkflowRefused(...) calls"
    outside = [(path, line, member) for path, line, member in raises
               if member is None or member not in DenialCode.__members__]
    assert outside == []


def test_the_walk_catches_a_free_string_code(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f():\n"
        "    raise WorkflowRefused('input_invalid', 'x')\n"
        "def g():\n"
        "    raise WorkflowRefused(DenialCode.INPUT_INVALID.value, 'x')\n"
        "def h():\n"
        "    raise WorkflowRefused(DenialCode.INPUT_INVALID, 'x')\n",
        encoding="utf-8")
    assert _raised_codes(planted) == [(2, None), (4, None), (6, "INPUT_INVALID")]


def test_the_refusal_carries_the_catalogue_code_with_its_status() -> None:
    refused = WorkflowRefused(DenialCode.EXECUTION_MISMATCH, "started with other inputs")
    assert refused.code is DenialCode.EXECUTION_MISMATCH
    assert refused.code.value == "execution_mismatch"
    assert refused.code.status == 409
    assert str(refused) == "execution_mismatch: started with other inputs"


def test_a_code_outside_the_catalogue_is_refused() -> None:
    with pytest.raises(ValueError, match="not_a_code"):
        WorkflowRefused("not_a_code", "x")  # type: ignore[arg-type]


def test_the_api_documents_no_workflow_only_code() -> None:
    """The REST API never answers a workflow run's own refusals, so its error bodies' `code`
    enums (one per status) leave them out; the codes it does answer at 409 and 422 stay."""
    def enum(status: int) -> list[str]:
        body: Any = error_serializer(status)().fields["error"]
        return list(get_override(type(body.fields["code"]), "field")["enum"])

    listed = {status: enum(status) for status in (409, 422)}
    assert "contract_mismatch" in listed[409]
    assert "schema_invalid" in listed[422]
    assert {code.value for code in WORKFLOW_ONLY} & {*listed[409], *listed[422]} == set()
