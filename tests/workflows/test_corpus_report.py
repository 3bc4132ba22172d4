"""The corpus report of docs/workflows.md, recounted: which valid workflows the embedded runtime
refuses before any step (from the runtime's own refusal, not a list of step kinds kept here),
and, for each diagnostic code, whether applying the remedy its diagnostic prints makes the file
check. Each test fails with the table docs/workflows.md should hold, so the report cannot go
stale: paste it in place of the old one."""

from __future__ import annotations

import re
from pathlib import Path

from dispatch.workflows import WorkflowRefused
from dispatch.workflows.race import refuse_protected_race
from protocols.denials import DiagnosticCode
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source
from tests.workflows.test_workflow_conformance import DOCS, ERR, FALSE_REJECTIONS, OK, REGISTRY

HERE = Path(__file__).parent
REMEDIED = sorted((HERE / "remedied").glob("*.*"))
REMEDY = re.compile(r"^#\s*remedy:\s*(.+?)\s*$", re.MULTILINE)
WHERE = re.compile(r" \(at [^()]*\)")


def _in_docs(table: str, what: str) -> None:
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert " ".join(table.split()) in text, (
        f"docs/workflows.md is out of date: its {what} should read\n\n{table}\n")


def _check(path: Path) -> CheckedWorkflow | Diagnostics:
    return check_source(path.read_text(encoding="utf-8"), REGISTRY, filename=path.name)


def runtime_refusals() -> list[tuple[str, str, str]]:
    """(file, step path, reason) for each valid workflow the checker accepts and the runtime
    refuses before any step."""
    refused = []
    for path in OK:
        checked = _check(path)
        assert isinstance(checked, CheckedWorkflow), path.name
        try:  # the runtime's own gate before a run
            refuse_protected_race(checked.workflow.steps)
        except WorkflowRefused as exc:
            refused.append((path.name, exc.path or "", f"{exc.code}: "
                            f"{WHERE.sub('', exc.message)}"))
    return refused


def test_docs_name_each_valid_workflow_the_runtime_refuses() -> None:
    refused = runtime_refusals()
    valid = len(OK) + len(FALSE_REJECTIONS)
    lines = [f"Of the {valid} valid workflows, the {len(OK)} the checker accepts are given to "
             f"the embedded runtime: **it refuses {len(refused)} of them before any step**"]
    if refused:
        lines[0] += ", each at the first step it does not run:"
        lines += ["", "| workflow | step | refusal |", "|---|---|---|"]
        lines += [f"| `{name}` | `{path}` | {reason} |" for name, path, reason in refused]
    else:
        lines[0] += ": it runs every step kind the checker accepts."
    _in_docs("\n".join(lines), "list of valid workflows the runtime refuses")


def remedies() -> list[tuple[str, str, str, str]]:
    """(code, fixture, remedy, result) for each fixture of remedied/: the err/ file of the same
    name with the remedy its diagnostic prints applied, and what checking it gives."""
    rows = []
    for path in REMEDIED:
        original = HERE / "err" / path.name
        diagnostics = _check(original)
        assert isinstance(diagnostics, Diagnostics), original.name
        [applied] = REMEDY.findall(path.read_text(encoding="utf-8"))
        helps = {d.help for d in diagnostics}
        assert applied in helps, (f"{path.name}: `# remedy:` must quote a help text the "
                                  f"checker prints for err/{path.name}: {sorted(helps)}")
        code = next(d.code.value for d in diagnostics if d.help == applied)
        result = _check(path)
        outcome = ("checks" if isinstance(result, CheckedWorkflow)
                   else "still refused: " + ", ".join(sorted(set(result.codes))))
        rows.append((code, path.name, applied, outcome))
    return sorted(rows)


def test_docs_say_whether_each_diagnostics_remedy_makes_the_file_check() -> None:
    rows = remedies()
    measured = {code for code, *_ in rows}
    missing = sorted(code.value for code in DiagnosticCode if code.value not in measured)
    checks = sum(1 for *_, outcome in rows if outcome == "checks")
    lines = [f"Remedies measured for {len(measured)} of the {len(DiagnosticCode)} diagnostic "
             f"codes; applying the remedy makes the file check for {checks} of "
             f"{len(rows)} fixtures"
             + (f" (not measured: {', '.join(missing)})" if missing else "") + ":", "",
             "| code | fixture | remedy applied (the diagnostic's help) | then |",
             "|---|---|---|---|"]
    lines += [f"| {code} | `{name}` | {remedy.replace('|', '&#124;')} | {outcome} |"
              for code, name, remedy, outcome in rows]
    _in_docs("\n".join(lines), "table of remedies")


def test_every_remedied_fixture_has_its_original() -> None:
    assert {p.name for p in REMEDIED} <= {p.name for p in ERR}
