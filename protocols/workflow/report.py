"""Rendering check results for people (compiler-style text) and programs (JSON)
(docs/workflows.md#diagnostic-codes).

Used by `manage.py check_workflow`, which only reads the files and prints what this returns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from protocols.denials import DiagnosticCode
from protocols.workflow.checked import CheckedWorkflow
from protocols.workflow.diagnostics import Diagnostic, Diagnostics
from protocols.workflow.ir import Span

Result = CheckedWorkflow | Diagnostics


def unreadable(filename: str, reason: str) -> Diagnostics:
    """The diagnostic for a file that could not be read at all."""
    return Diagnostics.of([Diagnostic(
        DiagnosticCode.MALFORMED_WORKFLOW, f"cannot read the workflow: {reason}",
        Span("<document>", filename), "pass a readable UTF-8 YAML or JSON file")])


def render_text(results: Sequence[tuple[str, Result]]) -> str:
    """`file:line:col: error[CODE]: message` blocks, or `file: ok (...)` for clean files."""
    lines: list[str] = []
    errors = 0
    for filename, result in results:
        if isinstance(result, CheckedWorkflow):
            effects = ", ".join(sorted(result.effects)) or "none"
            lines.append(f"{filename}: ok (workflow {result.workflow.name!r}, effects: {effects})")
            continue
        errors += len(result)
        lines.extend(d.render() for d in result)
    if errors:
        failed = sum(1 for _, r in results if isinstance(r, Diagnostics))
        lines.append(f"{errors} error{'s' if errors != 1 else ''} in {failed} "
                     f"file{'s' if failed != 1 else ''}")
    return "\n".join(lines)


def render_json(results: Sequence[tuple[str, Result]]) -> str:
    """`{"ok": bool, "files": [{"file", "ok", "workflow"?, "effects"?, "diagnostics"}]}`."""
    files: list[dict[str, object]] = []
    for filename, result in results:
        if isinstance(result, CheckedWorkflow):
            files.append({"file": filename, "ok": True, "workflow": result.workflow.name,
                          "effects": sorted(result.effects),
                          "contracts": dict(sorted(result.contracts.items())),
                          "diagnostics": []})
        else:
            files.append({"file": filename, "ok": False, "diagnostics": result.as_json()})
    return json.dumps({"ok": all(f["ok"] for f in files), "files": files}, indent=2,
                      ensure_ascii=False)
