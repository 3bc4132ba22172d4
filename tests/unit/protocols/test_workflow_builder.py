"""WorkflowBuilder: the same IR as the file format, step paths in diagnostics, the certificate."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from demo.contracts import build_registry
from protocols.denials import DiagnosticCode
from protocols.expiry import LONGEST_EXPIRY
from protocols.grants import Grant, parse_scope
from protocols.workflow import (
    CheckedWorkflow,
    Diagnostics,
    WorkflowBuilder,
    arm,
    check_workflow,
    format_text,
    parse_workflow,
    ref,
)
from protocols.workflow.builder import BlockBuilder
from protocols.workflow.ir import AgentCall

FINGERPRINTS = {"email.send": "impl-email-1", "payments.transfer": "impl-bank-1",
                "crm.lookup": "impl-crm-1"}
REGISTRY = build_registry(FINGERPRINTS)
SUPPORT = "support@acme.example"
FIXTURES = Path(__file__).resolve().parents[2] / "workflows"
D = DiagnosticCode


def email_workflow(effects: set[str] | None = None) -> WorkflowBuilder:
    return (WorkflowBuilder("refund", effects=effects or {"human", "external_write"})
            .authority(["email.send"], {"mailbox": [SUPPORT]})
            .handle("draft", "email_draft"))


def send_in_granted(b: BlockBuilder) -> object:
    return b.dispatch(ref("proposal"), permit=ref("permit"), bind="outcome")


def exact_action(builder: WorkflowBuilder) -> WorkflowBuilder:
    return (builder.propose("email.send", draft=ref("draft"), bind="proposal")
            .request_approval(ref("proposal"), bind="decision")
            .match(ref("decision"), Granted=arm(send_in_granted, permit="permit"),
                   Denied=arm(reason="reason")))


def only(result: CheckedWorkflow | Diagnostics) -> tuple[str, str]:
    assert isinstance(result, Diagnostics), result
    assert len(result) == 1, format_text(result)
    item = result.items[0]
    return item.code.value, item.span.path


def test_exact_action_flow_checks_clean() -> None:
    result = check_workflow(exact_action(email_workflow()).build(), REGISTRY)
    assert isinstance(result, CheckedWorkflow)
    assert result.effects == {"human", "external_write"}
    assert result.contracts == {"email.send": REGISTRY.resolve("email.send").fingerprint}
    assert result.binds(REGISTRY)


def test_certificate_does_not_bind_a_changed_handler() -> None:
    result = check_workflow(exact_action(email_workflow()).build(), REGISTRY)
    assert isinstance(result, CheckedWorkflow)
    changed = build_registry({**FINGERPRINTS, "email.send": "impl-email-2"})
    assert not result.binds(changed)


def test_bool_condition_does_not_authorize_and_reports_the_step_path() -> None:
    workflow = (email_workflow().input("approved", "bool")
                .propose("email.send", draft=ref("draft"), bind="proposal")
                .if_(ref("approved"), then=lambda b: b.dispatch(ref("proposal")))
                .build())
    result = check_workflow(workflow, REGISTRY)
    assert only(result) == ("AGL-E005", "steps[1].then[0]")
    assert isinstance(result, Diagnostics)
    diagnostic = result.items[0]
    assert diagnostic.span.where() == "<builder>:steps[1].then[0]"
    assert diagnostic.notes and "boolean never narrows" in diagnostic.notes[0].message
    rendered = diagnostic.render()
    assert rendered.startswith("<builder>:steps[1].then[0]: error[AGL-E005]: ")
    assert "\n  required: a permit bound to `proposal`; actual: no permit" in rendered
    assert "\n  help: " in rendered


def test_match_arm_paths_name_the_tag() -> None:
    def twice(b: BlockBuilder) -> object:
        return (b.dispatch(ref("proposal"), permit=ref("permit"))
                .dispatch(ref("proposal"), permit=ref("permit")))

    workflow = (email_workflow().propose("email.send", draft=ref("draft"), bind="proposal")
                .request_approval(ref("proposal"), bind="decision")
                .match(ref("decision"), Granted=arm(twice, permit="permit"), Denied=arm())
                .build())
    assert only(check_workflow(workflow, REGISTRY)) == ("AGL-E006", "steps[2].arms.Granted[1]")


def test_parallel_branch_paths() -> None:
    workflow = (email_workflow()
                .parallel(left=lambda b: b.propose("email.send", draft=ref("draft"), bind="a"),
                          right=lambda b: b.propose("email.send", draft=ref("draft"), bind="b"))
                .build())
    assert only(check_workflow(workflow, REGISTRY)) == (
        "AGL-E012", "steps[0].parallel.right[0].args.draft")


def test_nested_paths_in_try_and_loop() -> None:
    workflow = (email_workflow()
                .try_(lambda t: t.loop(lambda b: b.propose("email.send", draft=ref("draft")),
                                       times=2),
                      catch=lambda c: c.agent("reporter"))
                .build())
    assert only(check_workflow(workflow, REGISTRY)) == ("AGL-E011", "steps[0].try[0].do[0]")


def decision_through_try(builder: WorkflowBuilder) -> WorkflowBuilder:
    return (builder.propose("email.send", draft=ref("draft"), bind="proposal")
            .try_(lambda t: t.request_approval(ref("proposal"), bind="decision"),
                  result=ref("decision"), fallback={"tag": "Granted", "permit": "prm_cached"},
                  bind="verdict"))


def test_a_fallback_cannot_stand_in_for_a_decision_or_its_permit() -> None:
    send = arm(lambda b: b.dispatch(ref("proposal"), permit=ref("permit")), permit="permit")
    workflow = decision_through_try(email_workflow()).match(
        ref("verdict"), Granted=send, _=arm()).build()
    assert only(check_workflow(workflow, REGISTRY)) == (
        "AGL-E013", "steps[2].arms.Granted[0].permit")


def test_a_decision_made_inside_try_is_not_available_after_it() -> None:
    workflow = decision_through_try(email_workflow()).match(
        ref("decision"), Granted=arm(), Denied=arm()).build()
    result = check_workflow(workflow, REGISTRY)
    assert only(result) == ("AGL-E004", "steps[2]")
    assert isinstance(result, Diagnostics)
    assert "only on the `try` path" in (result.items[0].actual or "")


def test_literal_shaped_like_a_permit_is_not_one() -> None:
    workflow = (email_workflow().propose("email.send", draft=ref("draft"), bind="proposal")
                .dispatch(ref("proposal"), permit={"permit_id": "prm_1", "tag": "Granted"})
                .build())
    assert only(check_workflow(workflow, REGISTRY)) == ("AGL-E013", "steps[1].permit")


def test_builder_and_file_build_the_same_judgment() -> None:
    text = (FIXTURES / "err" / "e005_bool_if_dispatch.yaml").read_text(encoding="utf-8")
    parsed = parse_workflow(text, filename="e005.yaml")
    assert not isinstance(parsed, Diagnostics)
    from_file = check_workflow(parsed, REGISTRY)
    built = (WorkflowBuilder("bool-approval", effects={"human", "external_write"})
             .authority(["email.send"], {"mailbox": "*"}).handle("draft", "email_draft")
             .input("approved", "bool")
             .propose("email.send", draft=ref("draft"), bind="proposal")
             .if_(ref("approved"), then=lambda b: b.dispatch(ref("proposal"))).build())
    from_builder = check_workflow(built, REGISTRY)
    assert isinstance(from_file, Diagnostics) and isinstance(from_builder, Diagnostics)
    assert [(d.code, d.span.path, d.message) for d in from_file] == [
        (d.code, d.span.path, d.message) for d in from_builder]


def grant(scope: dict[str, object], *, revoked: bool = False) -> Grant:
    return Grant(id="grt_1", issuer="admin", subject="agent", operations=frozenset({"email.send"}),
                 scope=parse_scope(scope), not_before=None, expires_at=None,
                 revoked_at=datetime(2030, 1, 1, tzinfo=UTC) if revoked else None,
                 parent_id=None)


def created_from(sender: str) -> WorkflowBuilder:
    return (WorkflowBuilder("created", effects={"human"})
            .authority(["email.send"], {"mailbox": "*"})
            .create("email_draft", {"from": sender, "to": ["a@example.com"], "subject": "x",
                                    "body": "y"}, bind="draft")
            .propose("email.send", draft=ref("draft"), bind="proposal"))


def test_grants_intersect_the_declared_authority() -> None:
    workflow = created_from("sales@acme.example").build()
    assert isinstance(check_workflow(workflow, REGISTRY), CheckedWorkflow)
    assert isinstance(check_workflow(workflow, REGISTRY, grants=[grant({"mailbox": "*"})]),
                      CheckedWorkflow)
    narrow = check_workflow(workflow, REGISTRY, grants=[grant({"mailbox": [SUPPORT]})])
    assert only(narrow) == ("AGL-E001", "steps[1]")
    assert only(check_workflow(workflow, REGISTRY, grants=[])) == ("AGL-E001", "steps[1]")
    revoked = check_workflow(workflow, REGISTRY, grants=[grant({"mailbox": "*"}, revoked=True)])
    assert only(revoked) == ("AGL-E001", "steps[1]")


def test_agent_tools_count_towards_the_effect_ceiling() -> None:
    workflow = (WorkflowBuilder("research", effects={"read"})
                .authority(["*"], {"customer": "*", "account": "*"})
                .agent("researcher", tools=["crm.lookup", "payments.transfer"], bind="notes")
                .build())
    result = check_workflow(workflow, REGISTRY)
    assert only(result) == ("AGL-E008", "steps[0]")
    assert isinstance(result, Diagnostics)
    assert "financial_write" in (result.items[0].actual or "")


def test_diagnostics_json_form() -> None:
    workflow = (email_workflow().propose("email.send", draft=ref("draft"), bind="proposal")
                .dispatch(ref("proposal")).build())
    result = check_workflow(workflow, REGISTRY)
    assert isinstance(result, Diagnostics)
    [item] = result.as_json()
    assert item["code"] == "AGL-E005"
    assert item["path"] == "steps[1]"
    assert item["line"] is None and item["file"] is None
    assert item["end_line"] is None and item["end_column"] is None  # a builder has no text
    assert set(item) >= {"title", "severity", "message", "required", "actual", "help", "notes"}


class TestCheckedWorkflowConstructor:
    def certificate(self) -> CheckedWorkflow:
        result = check_workflow(exact_action(email_workflow()).build(), REGISTRY)
        assert isinstance(result, CheckedWorkflow)
        return result

    def test_cannot_be_constructed_outside_the_checker(self) -> None:
        workflow = exact_action(email_workflow()).build()
        with pytest.raises(TypeError, match="issued only by check_workflow"):
            CheckedWorkflow(object(), workflow, frozenset(), {})
        with pytest.raises(TypeError):
            CheckedWorkflow(workflow, frozenset(), {})  # type: ignore[call-arg]

    def test_a_bare_instance_carries_nothing(self) -> None:
        bare = CheckedWorkflow.__new__(CheckedWorkflow)
        with pytest.raises(AttributeError):
            _ = bare.workflow

    def test_is_immutable(self) -> None:
        checked = self.certificate()
        with pytest.raises(AttributeError):
            checked._effects = frozenset({"financial_write"})
        with pytest.raises(AttributeError):
            del checked._workflow

    def test_cannot_be_copied_pickled_or_replaced(self) -> None:
        checked = self.certificate()
        with pytest.raises(TypeError):
            copy.copy(checked)
        with pytest.raises(TypeError):
            pickle.dumps(checked)
        with pytest.raises(TypeError):
            dataclasses.replace(checked, effects=frozenset())  # type: ignore[type-var]

    def test_contracts_mapping_is_read_only(self) -> None:
        checked = self.certificate()
        with pytest.raises(TypeError):
            checked.contracts["email.send"] = "sha256:forged"  # type: ignore[index]


def test_builder_never_raises_on_odd_but_well_formed_input() -> None:
    workflow = (WorkflowBuilder("odd")
                .dispatch("not a proposal")
                .match(ref("nothing"))
                .loop(lambda b: b.let("x", ref("x")), times=0)
                .edit({"id": "r1"}, {"a": 1})
                .request_approval(ref("x"))
                .race(a=lambda b: None, b=lambda b: b.approve("?"))
                .build())
    result = check_workflow(workflow, REGISTRY)
    assert isinstance(result, Diagnostics)
    assert {d.code for d in result} >= {D.FORGED_VALUE, D.UNDEFINED_NAME}


def draft_in_branch(name: str) -> Callable[[BlockBuilder], object]:
    """A branch that makes its own draft and proposal and reads the shared `ticket` data."""
    return lambda b: (
        b.create("email_draft", {"from": SUPPORT, "to": ["a@example.com"], "subject": "x",
                                 "body": "y"}, bind=f"{name}_draft")
        .propose("email.send", draft=ref(f"{name}_draft"), bind=f"{name}_proposal")
        .agent(f"{name}_summarizer", input={"ticket": ref("ticket")}))


def test_a_value_captured_by_two_branches_is_fixed_only_by_what_exists() -> None:
    """A draft two write proposals name cannot be shared (only a pure read may grant shared
    reads, docs/workflows.md#typing-rules): the fix-it suggests no grant, and what it does
    suggest (a value per branch, made inside it; data used freely) checks clean."""
    shared = check_workflow(email_workflow().parallel(
        left=lambda b: b.propose("email.send", draft=ref("draft"), bind="a"),
        right=lambda b: b.propose("email.send", draft=ref("draft"), bind="b")).build(), REGISTRY)
    assert isinstance(shared, Diagnostics)
    [diagnostic] = shared.items
    assert diagnostic.code == D.PARALLEL_CAPTURE
    assert "shar" not in diagnostic.help.lower()
    assert "grant" not in diagnostic.help.lower()
    assert "create or obtain them inside the branch" in diagnostic.help
    assert "JSON data may be used by every branch" in diagnostic.help
    fixed = (WorkflowBuilder("refund", effects={"human", "read"})
             .authority(["email.send"], {"mailbox": [SUPPORT]}).input("ticket")
             .parallel(left=draft_in_branch("left"), right=draft_in_branch("right")).build())
    assert isinstance(check_workflow(fixed, REGISTRY), CheckedWorkflow)


def delegated(scope: dict[str, object], budget: int = 2) -> WorkflowBuilder:
    return (WorkflowBuilder("delegated", effects={"read"})
            .authority(["crm.lookup"], {"customer": ["cus-001", "cus-002"]})
            .agent("researcher", delegate={"operations": ["crm.lookup"], "scope": scope,
                                           "expires_in": 60, "budget": budget}, bind="notes"))


def test_a_delegated_agent_builds_the_ir_of_the_file_format() -> None:
    built = delegated({"customer": ["cus-001"]}).build()
    parsed = parse_workflow("""version: 1
name: delegated
effects: [read]
authority: [{operations: [crm.lookup], scope: {customer: [cus-001, cus-002]}}]
steps:
  - agent: researcher
    delegate: {operations: [crm.lookup], scope: {customer: [cus-001]}, expires_in: 60,
               budget: 2}
    bind: notes
""", filename="delegated.yaml")
    assert not isinstance(parsed, Diagnostics)
    [from_file], [from_builder] = parsed.steps, built.steps
    assert isinstance(from_file, AgentCall) and isinstance(from_builder, AgentCall)
    assert from_file.tools == from_builder.tools == ("crm.lookup",)  # default: the delegated
    assert from_file.delegate is not None and from_builder.delegate is not None
    assert [(d.operations, dict(d.scope), d.expires_in, d.budget)
            for d in (from_file.delegate, from_builder.delegate)] == [
        (("crm.lookup",), {"customer": frozenset({"cus-001"})}, 60, 2)] * 2
    assert isinstance(check_workflow(built, REGISTRY), CheckedWorkflow)


@pytest.mark.parametrize("scope", [{"customer": ["cus-003"]}, {"customer": "*"},
                                   {"customer": ["cus-001"], "account": ["acct-001"]}],
                         ids=["value", "any", "key"])
def test_a_delegation_wider_than_the_declared_authority_is_e001(
    scope: dict[str, object],
) -> None:
    assert only(check_workflow(delegated(scope).build(), REGISTRY)) == (
        "AGL-E001", "steps[0].delegate")


def test_a_delegation_needs_a_live_deployment_grant_when_grants_are_passed() -> None:
    workflow = delegated({"customer": ["cus-001"]}).build()
    lookup = dataclasses.replace(grant({"customer": ["cus-001"]}),
                                 operations=frozenset({"crm.lookup"}))
    assert isinstance(check_workflow(workflow, REGISTRY, grants=[lookup]), CheckedWorkflow)
    revoked = dataclasses.replace(lookup, revoked_at=datetime(2030, 1, 1, tzinfo=UTC))
    result = check_workflow(workflow, REGISTRY, grants=[revoked])
    assert isinstance(result, Diagnostics)
    assert {(d.code.value, d.span.path) for d in result} >= {("AGL-E001", "steps[0].delegate")}


@pytest.mark.parametrize("delegate", [
    {"operations": ["crm.lookup"], "scope": {}, "expires_in": 0, "budget": 1},
    {"operations": ["*"], "scope": {}, "expires_in": 1, "budget": 1},
    {"operations": ["crm.lookup"], "scope": {}, "expires_in": 1, "budget": -1},
    {"operations": ["crm.lookup"], "scope": {}, "expires_in": 1},
])
def test_a_malformed_delegation_raises_in_the_builder(delegate: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="delegate"):
        WorkflowBuilder("x").agent("a", delegate=delegate)


@pytest.mark.parametrize("expires_in", [LONGEST_EXPIRY + 1, 10**30])
def test_a_delegation_valid_beyond_any_date_is_refused(expires_in: int) -> None:
    with pytest.raises(ValueError, match="no date can hold"):
        WorkflowBuilder("delegated", effects={"read"}).agent(
            "researcher", delegate={"operations": ["crm.lookup"], "scope": {"customer": "*"},
                                    "expires_in": expires_in, "budget": 2})


def test_a_delegation_valid_for_the_longest_span_a_date_holds_builds() -> None:
    built = (WorkflowBuilder("delegated", effects={"read"})
             .agent("researcher", delegate={"operations": ["crm.lookup"],
                                            "scope": {"customer": "*"},
                                            "expires_in": LONGEST_EXPIRY, "budget": 2}).build())
    [step] = built.steps
    assert isinstance(step, AgentCall) and step.delegate is not None
    assert step.delegate.expires_in == LONGEST_EXPIRY
