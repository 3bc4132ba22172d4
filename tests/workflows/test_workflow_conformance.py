"""Conformance fixtures: every file under ok/ checks clean, every file under err/ yields exactly
the diagnostics its `# expect:` lines (or JSON `x-expect`) name, with their line and column.
A file of err/ that is a valid workflow all the same says why in `# valid:` (`x-valid`): the
false rejections docs/workflows.md counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from demo.contracts import build_registry
from protocols.denials import DiagnosticCode
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source
from tests.support.spans import covered

HERE = Path(__file__).parent
DOCS = HERE.parents[1] / "docs" / "workflows.md"
OK = sorted((HERE / "ok").glob("*.*"))
ERR = sorted((HERE / "err").glob("*.*"))
EXPECT = re.compile(r"^#\s*expect:\s*(.+?)\s*$", re.MULTILINE)
ITEM = re.compile(r"(AGL-E\d{3}) at (\d+):(\d+)")
VALID = re.compile(r"^#\s*valid:\s*(.+?)\s*$", re.MULTILINE)
REGISTRY = build_registry({"email.send": "impl-email-1", "payments.transfer": "impl-bank-1",
                           "crm.lookup": "impl-crm-1", "research.fetch": "impl-fetch-1",
                           "evidence.attest": "impl-attest-1",
                           "report.publish": "impl-publish-1"})


def expectations(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        raw = json.loads(text)["x-expect"]
        return [raw] if isinstance(raw, str) else list(raw)
    return EXPECT.findall(text)


def valid_reason(path: Path) -> str | None:
    """Why a rejected workflow is valid, if its file says it is one."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        reason = json.loads(text).get("x-valid")
        return reason if isinstance(reason, str) else None
    found = VALID.search(text)
    return found.group(1) if found else None


FALSE_REJECTIONS = [path for path in ERR if valid_reason(path)]


def test_suite_is_large_enough() -> None:
    assert len(OK) >= 15
    assert len(ERR) >= 40
    assert len(OK) + len(ERR) >= 40


@pytest.mark.parametrize("path", OK, ids=lambda p: p.name)
def test_positive_fixture_checks_clean(path: Path) -> None:
    assert expectations(path) == ["ok"]
    result = check_source(path.read_text(encoding="utf-8"), REGISTRY, filename=str(path))
    assert isinstance(result, CheckedWorkflow), result


@pytest.mark.parametrize("path", ERR, ids=lambda p: p.name)
def test_negative_fixture_reports_exact_code_and_location(path: Path) -> None:
    wanted = sorted(ITEM.fullmatch(item).groups() for item in expectations(path))  # type: ignore[union-attr]
    assert wanted, f"{path.name} has no `expect:` line"
    result = check_source(path.read_text(encoding="utf-8"), REGISTRY, filename=str(path))
    assert isinstance(result, Diagnostics), f"{path.name} unexpectedly checked clean"
    got = sorted((d.code.value, str(d.line), str(d.column)) for d in result)
    assert got == wanted, "\n".join(d.render() for d in result)
    for diagnostic in result:
        assert diagnostic.span.file == str(path)
        assert diagnostic.help
        assert diagnostic.span.path


@pytest.mark.parametrize("path", ERR, ids=lambda p: p.name)
def test_negative_fixture_diagnostics_have_start_and_end(path: Path) -> None:
    """Every diagnostic of a file, but a syntax error's, spans the token its start names."""
    text = path.read_text(encoding="utf-8")
    result = check_source(text, REGISTRY, filename=str(path))
    assert isinstance(result, Diagnostics)
    for diagnostic in result:
        span = diagnostic.span
        if diagnostic.code is DiagnosticCode.MALFORMED_WORKFLOW and span.path == "<document>":
            assert (span.end_line, span.end_column) == (0, 0)  # a syntax error: a start only
            continue
        assert (span.end_line, span.end_column) > (span.line, span.column), diagnostic.render()
        text_of = covered(text, span)
        assert text_of.strip() == text_of != "", (text_of, diagnostic.render())
        item = diagnostic.as_json()
        assert (item["end_line"], item["end_column"]) == (span.end_line, span.end_column)


@pytest.mark.parametrize("path", ERR, ids=lambda p: p.name)
def test_negative_fixture_name_states_its_code(path: Path) -> None:
    code = path.name.split("_", 1)[0].upper()  # e005_... -> E005
    assert all(f"AGL-{code}" in item for item in expectations(path))


def test_every_diagnostic_code_has_a_negative_fixture() -> None:
    from protocols.denials import DiagnosticCode

    covered = {item.split()[0] for path in ERR for item in expectations(path)}
    assert covered == {code.value for code in DiagnosticCode}


def test_docs_report_how_many_valid_workflows_the_checker_rejects() -> None:
    """docs/workflows.md states the count, recounted here from the files, and names each one
    (docs/design.md#how-it-is-tested: measure rejected valid workflows before the calculus
    grows)."""
    text = DOCS.read_text(encoding="utf-8")
    valid, rejected = len(OK) + len(FALSE_REJECTIONS), len(FALSE_REJECTIONS)
    sentence = (f"The corpus holds **{valid} valid workflows**: the {len(OK)} files of `ok/` "
                f"and the {rejected} files of `err/` marked valid; **the checker rejects "
                f"{rejected} of them**")
    assert sentence in " ".join(text.split())
    for path in FALSE_REJECTIONS:
        assert f"`{path.name}`" in text, path.name


def test_only_rejected_files_are_marked_valid() -> None:
    assert not [path.name for path in OK if valid_reason(path)]
    assert len(FALSE_REJECTIONS) < len(ERR)
