"""The checker reads the resource kinds' tables it is given (`kinds`), not a global: a kind it
is not given is unknown, and a table it is given decides what a step may do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from demo.contracts import build_registry
from demo.tables import EMAIL_DRAFT
from protocols.denials import DiagnosticCode
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceEvent
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source

REGISTRY = build_registry({"email.send": "e"})
#: The exact-action workflow the checker's examples hold (tests/workflows/ok/).
EXAMPLES = Path(__file__).resolve().parents[2] / "workflows" / "ok"
REFUND = (EXAMPLES / "refund_email.yaml").read_text(encoding="utf-8")


def codes(result: CheckedWorkflow | Diagnostics) -> list[DiagnosticCode]:
    assert isinstance(result, Diagnostics), result
    return [diagnostic.code for diagnostic in result]


def test_the_registered_kinds_by_default_and_the_given_ones_otherwise() -> None:
    assert isinstance(check_source(REFUND, REGISTRY, filename="wf.yaml"), CheckedWorkflow)
    given = {"email_draft": EMAIL_DRAFT}
    assert isinstance(check_source(REFUND, REGISTRY, filename="wf.yaml", kinds=given),
                      CheckedWorkflow)
    # Not given: unknown, though the demo registered it.
    assert "email_draft" in RESOURCE_PROTOCOLS
    unknown = check_source(REFUND, REGISTRY, filename="wf.yaml", kinds={})
    assert codes(unknown) == [DiagnosticCode.UNKNOWN_OPERATION] * 2
    assert isinstance(unknown, Diagnostics)
    assert [d.message for d in unknown] == [
        "input `draft`: no resource protocol named `email_draft`",
        "email.send names resource kinds the checker was not given: email_draft"]


def test_the_given_table_decides_what_a_step_may_do() -> None:
    """The same kind with a table that never lets a draft be proposed: the proposal is refused
    by the checker, while the registered table allows it."""
    no_propose = replace(EMAIL_DRAFT, transitions={
        key: target for key, target in EMAIL_DRAFT.transitions.items()
        if key != ("draft", ResourceEvent.PROPOSE)})
    refused = check_source(REFUND, REGISTRY, filename="wf.yaml",
                           kinds={"email_draft": no_propose})
    assert codes(refused) == [DiagnosticCode.INVALID_PROTOCOL_STATE] * 3
    assert isinstance(refused, Diagnostics)
    assert next(iter(refused)).message == (
        "propose with `$draft`: `draft` is draft; `propose` is not allowed")
