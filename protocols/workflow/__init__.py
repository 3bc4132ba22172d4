"""Workflows: IR, builder, file format, static checker and contract compatibility.

Public API (docs/design.md#extensions):

- `WorkflowBuilder`, `ref`, `arm`: build the IR in Python; `parse_workflow(text, filename=)`:
  read the declarative format (docs/workflows.md) into the same IR.
- `check_workflow(workflow, registry, *, grants=None, kinds=None) -> CheckedWorkflow |
  Diagnostics`: the static judgment of docs/workflows.md#typing-rules over the resource kinds'
  tables `kinds` (by default the registered ones); `check_source` parses and checks in one call.
- `Diagnostic`, `Diagnostics`, `format_text`: stable codes (`DiagnosticCode`), locations,
  required/actual state and remedies (docs/workflows.md#diagnostic-codes).
- `classify_change(old, new) -> Compatibility` and `contract_from_declaration`:
  docs/design.md#extensions.

Pure: no Django, no clock, no I/O; callers read files and pass their text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocols.contracts import ContractRegistry
from protocols.denials import DiagnosticCode
from protocols.grants import Grant
from protocols.lifecycle import ResourceProtocol
from protocols.workflow.builder import WorkflowBuilder, arm, ref
from protocols.workflow.checked import CheckedWorkflow
from protocols.workflow.checker import check_workflow
from protocols.workflow.compat import (
    Change,
    Compatibility,
    Level,
    classify_change,
    contract_from_declaration,
)
from protocols.workflow.diagnostics import Diagnostic, Diagnostics, Note, format_text
from protocols.workflow.ir import FORMAT_VERSION, Span, Workflow
from protocols.workflow.located import YAML_AVAILABLE
from protocols.workflow.parse import parse_workflow

__all__ = [
    "FORMAT_VERSION",
    "YAML_AVAILABLE",
    "Change",
    "CheckedWorkflow",
    "Compatibility",
    "Diagnostic",
    "DiagnosticCode",
    "Diagnostics",
    "Level",
    "Note",
    "Span",
    "Workflow",
    "WorkflowBuilder",
    "arm",
    "check_source",
    "check_workflow",
    "classify_change",
    "contract_from_declaration",
    "format_text",
    "parse_workflow",
    "ref",
]


def check_source(text: str, registry: ContractRegistry, *, filename: str,
                 grants: Iterable[Grant] | None = None,
                 kinds: Mapping[str, ResourceProtocol] | None = None,
                 ) -> CheckedWorkflow | Diagnostics:
    """Parse `text` (YAML or JSON by `filename`) and check it: what `check_workflow` CLI runs."""
    workflow = parse_workflow(text, filename=filename)
    if isinstance(workflow, Diagnostics):
        return workflow
    return check_workflow(workflow, registry, grants=grants, kinds=kinds)
