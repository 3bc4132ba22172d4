"""The declarative format: positions from YAML and JSON, references, literals, refusals, and
the purity of the package."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from protocols.denials import DiagnosticCode
from protocols.workflow import Diagnostic, Diagnostics, Span, Workflow, format_text, parse_workflow
from protocols.workflow.ir import Dispatch, Literal, Loop, Match, Propose, Ref
from protocols.workflow.located import load_located
from tests.support.spans import covered

ROOT = Path(__file__).resolve().parents[3]

DOC = """\
version: 1
name: positions
effects: [human]
inputs:
  draft: {handle: email_draft}
steps:
  - propose: email.send
    args: {draft: $draft, note: $$literal}
    bind: proposal
  - match: $proposal
    arms:
      Granted:
        bind: {permit: permit}
        do:
          - dispatch: $proposal
            permit: $permit
"""


def parsed(text: str, filename: str = "wf.yaml") -> Workflow:
    result = parse_workflow(text, filename=filename)
    assert isinstance(result, Workflow), result
    return result


def refused(text: str, filename: str = "wf.yaml") -> Diagnostic:
    result = parse_workflow(text, filename=filename)
    assert isinstance(result, Diagnostics)
    [diagnostic] = result.items
    assert diagnostic.code is DiagnosticCode.MALFORMED_WORKFLOW
    return diagnostic


def test_yaml_spans_keep_line_column_and_path() -> None:
    workflow = parsed(DOC)
    propose, match = workflow.steps
    assert isinstance(propose, Propose) and isinstance(match, Match)
    assert (propose.span.line, propose.span.column, propose.span.path) == (7, 5, "steps[0]")
    draft = dict(propose.args)["draft"]
    assert isinstance(draft, Ref) and draft.name == "draft"
    assert (draft.span.line, draft.span.column) == (8, 19)
    note = dict(propose.args)["note"]
    assert isinstance(note, Literal) and note.value == "$literal"
    [granted] = match.arms
    assert granted.tag == "granted" and granted.bindings == (("permit", "permit"),)
    [dispatch] = granted.body
    assert isinstance(dispatch, Dispatch)
    assert dispatch.span.path == "steps[1].arms.Granted[0]"
    assert dispatch.permit is not None and dispatch.permit.span.path == \
        "steps[1].arms.Granted[0].permit"
    assert (dispatch.permit.span.line, dispatch.permit.span.column) == (16, 21)


def test_yaml_spans_end_where_their_token_ends() -> None:
    workflow = parsed(DOC)
    propose, match = workflow.steps
    assert isinstance(propose, Propose) and isinstance(match, Match)
    assert covered(DOC, propose.span) == "propose"  # a step is located at its head key
    draft = dict(propose.args)["draft"]
    assert isinstance(draft, Ref) and covered(DOC, draft.span) == "$draft"
    [granted] = match.arms
    assert covered(DOC, granted.span) == "Granted"
    [dispatch] = granted.body
    assert isinstance(dispatch, Dispatch) and dispatch.permit is not None
    assert covered(DOC, dispatch.permit.span) == "$permit"
    assert (workflow.span.line, workflow.span.column) == (1, 1)
    assert (workflow.span.end_line, workflow.span.end_column) == (16, 28)  # the last member


def test_yaml_collections_and_block_scalars_end_with_their_text() -> None:
    text = "a:\n  - x: |\n      two\n      lines\n\n  # trailing\nb: {c: [1, 2]}\n"
    root = load_located(text, "wf.yaml")
    block = root.get("a")
    assert block is not None
    assert (block.pos.end_line, block.pos.end_column) == (4, 12)
    flow = root.get("b")
    assert flow is not None
    assert (flow.pos.line, flow.pos.column, flow.pos.end_line, flow.pos.end_column) == \
        (7, 4, 7, 15)


def test_json_spans_end_where_their_token_ends() -> None:
    text = '{"version": 1, "name": "j",\n "steps": [\n   {"dispatch": "$p"}]}'
    workflow = parsed(text, "wf.json")
    [step] = workflow.steps
    assert isinstance(step, Dispatch) and isinstance(step.proposal, Ref)
    assert covered(text, step.span) == '"dispatch"'
    assert covered(text, step.proposal.span) == '"$p"'
    assert covered(text, workflow.span) == text


def test_malformed_documents_span_the_offending_node() -> None:
    text = "version: 1\nname: x\nsteps:\n  - dispatch: $p\n    permt: $q\n"
    diagnostic = refused(text)
    assert covered(text, diagnostic.span) == "permt"
    item = diagnostic.as_json()
    assert (item["line"], item["column"], item["end_line"], item["end_column"]) == (5, 5, 5, 10)


def test_a_syntax_error_has_a_start_only() -> None:
    diagnostic = refused('{"a": 1, "a": 2}', "wf.json")
    item = diagnostic.as_json()
    assert (item["line"], item["column"], item["end_line"], item["end_column"]) == \
        (1, 10, None, None)


def test_json_and_yaml_build_the_same_ir_modulo_positions() -> None:
    data = yaml.safe_load(DOC)
    from_json = parsed(json.dumps(data, indent=2), "wf.json")
    from_yaml = parsed(DOC)

    def strip(node: object) -> object:
        if isinstance(node, Span):
            return node.path
        if isinstance(node, tuple):
            return tuple(strip(item) for item in node)
        if hasattr(node, "__dataclass_fields__"):
            return {k: strip(getattr(node, k)) for k in node.__dataclass_fields__}
        return node

    assert strip(from_json.steps) == strip(from_yaml.steps)


def test_json_positions() -> None:
    text = '{"version": 1, "name": "j",\n "steps": [\n   {"dispatch": "$p"}]}'
    [step] = parsed(text, "wf.json").steps
    assert isinstance(step, Dispatch)
    assert (step.span.line, step.span.column) == (3, 5)
    assert isinstance(step.proposal, Ref)
    assert (step.proposal.span.line, step.proposal.span.column) == (3, 17)


@pytest.mark.parametrize(("text", "where"), [
    ('{"a": 1, "a": 2}', (1, 10)),
    ('{"a": 1} x', (1, 10)),
    ('{"a": [1, 2,]}', (1, 13)),
    ('{"a": NaN}', (1, 7)),
    ("", (1, 1)),
])
def test_json_reader_refusals(text: str, where: tuple[int, int]) -> None:
    diagnostic = refused(text, "wf.json")
    assert (diagnostic.line, diagnostic.column) == where


def test_json_reader_values() -> None:
    node = load_located('{"s": "a\\u00e9\\n", "n": [-1.5e2, 0, true, null]}', "x.json")
    assert node.plain() == {"s": "aé\n", "n": [-150.0, 0, True, None]}


@pytest.mark.parametrize(("text", "where", "fragment"), [
    ("version: 2\nname: x\nsteps: []\n", (1, 10), "version must be 1"),
    ("name: x\nsteps: []\n", (1, 1), "version must be 1"),
    ("version: 1\nname: x\n", (1, 1), "needs `steps`"),
    ("version: 1\nname: x\nsteps:\n  - dispatch: $p\n    permt: $q\n", (5, 5), "permt"),
    ("version: 1\nname: x\nsteps:\n  - dispatch: $p\n    propose: x\n", (4, 5), "exactly one"),
    ("version: 1\nname: x\nsteps:\n  - let: y\n    value: {a: $b}\n", (5, 16), "whole values"),
    ("version: 1\nname: x\nsteps:\n  - dispatch: $p.\n", (4, 15), "not a valid reference"),
    ("version: 1\nname: x\nsteps:\n  - dispatch: [\n", (5, 1), "invalid YAML"),
    ("version: 1\nname: x\nunknown: 1\nsteps: []\n", (3, 1), "unknown field"),
    ("version: 1\nname: x\nsteps:\n  - parallel: {only: []}\n", (4, 15), "two named"),
    ("version: 1\nname: x\nsteps:\n  - try: []\n", (4, 5), "catch or a fallback"),
    ("version: 1\nname: x\nsteps: []\nauthority:\n  - {operations: [a], scope: {k: []}}\n",
     (5, 30), "empty list"),
])
def test_malformed_documents(text: str, where: tuple[int, int], fragment: str) -> None:
    diagnostic = refused(text)
    assert (diagnostic.line, diagnostic.column) == where, diagnostic.render()
    assert fragment in diagnostic.message


def test_extension_fields_are_ignored() -> None:
    workflow = parsed("version: 1\nname: x\nx-owner: team\nsteps:\n  - receive: host\n"
                      "    x-note: hi\n    bind: m\n")
    assert len(workflow.steps) == 1


def test_loop_with_parallel_option_is_a_loop() -> None:
    workflow = parsed("version: 1\nname: x\nsteps:\n  - loop: $items\n    parallel: true\n"
                      "    as: it\n    do: []\n")
    [loop] = workflow.steps
    assert isinstance(loop, Loop) and loop.parallel and loop.item == "it"


def test_diagnostics_are_ordered_deduplicated_and_never_empty() -> None:
    a = Diagnostic(DiagnosticCode.UNDEFINED_NAME, "m", Span("steps[1]", "f", 9, 1), "h")
    b = Diagnostic(DiagnosticCode.UNDEFINED_NAME, "m", Span("steps[0]", "f", 3, 5), "h")
    diagnostics = Diagnostics.of([a, b, a])
    assert diagnostics.items == (b, a)
    assert format_text(diagnostics).endswith("\n2 errors")
    assert b.render().startswith("f:3:5: error[AGL-E014]: m\n")
    with pytest.raises(ValueError, match="at least one"):
        Diagnostics(())


ALLOWED_IMPORTS = {"__future__", "collections.abc", "contextlib", "dataclasses", "enum",
                   "functools", "json", "re", "typing", "types", "importlib"}


@pytest.mark.parametrize("path", sorted((ROOT / "protocols" / "workflow").glob("*.py")),
                         ids=lambda p: p.name)
def test_workflow_package_imports_only_pure_modules(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            assert name in ALLOWED_IMPORTS or name.startswith("protocols."), (path.name, name)
        assert not any(n in {"time", "random", "datetime", "os", "io", "pathlib"} for n in names)


def test_importing_the_package_loads_no_django() -> None:
    code = ("import sys, protocols.workflow, demo.contracts; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'django', 'rest_framework', 'celery'}); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
