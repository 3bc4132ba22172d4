"""Bounded delegation (docs/design.md#delegation): a workflow's agent step runs its
sub-agent under a child grant that is only narrower than the workflow principal's, whose budget is
carved out of the run's, and that is revoked when the step ends, however it ends."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from dispatch.agent import FinalAnswer, ToolCall, ToolSpec
from dispatch.models import (
    ApiToken,
    AuditEvent,
    BudgetCounter,
    Delegation,
    Execution,
    Grant,
    Operation,
    Principal,
    Proposal,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_delegate, grant_issue, grant_revoke
from dispatch.services.delegations import (
    Bounds,
    SubAgent,
    delegation_open,
    reconcile_delegations,
)
from dispatch.services.executions import execution_create, execution_move
from dispatch.workflows import WorkflowRefused, WorkflowRun, run_workflow
from protocols.denials import Denial
from protocols.expiry import TOO_LATE
from protocols.lifecycle_runs import ExecutionEvent
from protocols.workflow import CheckedWorkflow
from tests.conftest import MAILBOX, World
from tests.support.delegation import (
    AGENT,
    checked,
    delegated_workflow,
    lookup,
    only_delegation,
    script,
    scripted,
)
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def run(world: World, workflow: CheckedWorkflow, agents: Mapping[str, Any],
        execution_id: str | None = None) -> WorkflowRun:
    return run_workflow(workflow, principal=world.owner, execution_id=execution_id,
                        agents=agents, now=world.now)


def calls(result: WorkflowRun) -> list[tuple[str, str | None]]:
    [step] = [o for o in result.outcomes if o.step == "agent"]
    return [(c["status"], c["code"]) for c in step.detail["calls"]]


def used(key: str) -> int:
    return BudgetCounter.objects.get(key=key).used


def run_counter(world: World, result: WorkflowRun) -> str:
    return f"execution:{world.owner.id}:{result.execution_id}"


def crm_grant(world: World) -> Grant:
    return world.owner.grants.get(operations=["crm.lookup"])


# --- the step, from its start to its end ----------------------------------------------------------


def test_the_sub_agent_runs_under_a_narrower_child_grant_revoked_when_the_step_ends(
    world: World,
) -> None:
    result = run(world, checked(delegated_workflow()), scripted(lookup()))
    assert result.state == "finished", result
    [outcome] = result.outcomes
    assert (outcome.step, outcome.status, outcome.detail["result"]) == (
        "agent", "completed", {"tier": "gold"})
    assert calls(result) == [("completed", None)]
    delegation = only_delegation()
    grant, sub = delegation.grant, delegation.principal
    # The child of the workflow principal's own grant, only narrower, for this step alone.
    assert grant.parent_id == crm_grant(world).id
    assert (grant.subject_id, grant.operations, grant.scope, grant.budget) == (
        sub.id, ["crm.lookup"], {"customer": ["cus-001"]}, 2)
    assert grant.expires_at == delegation.started_at + timedelta(seconds=600)
    assert sub.name.startswith(f"{AGENT}@dlg_") and sub.tools == ["crm.lookup"]
    assert sub.tenant_id == world.owner.tenant_id and sub.kind == "agent"
    assert not ApiToken.objects.filter(principal=sub).exists()
    operation = Operation.objects.get()
    assert (operation.principal_id, operation.execution_id, operation.state) == (
        sub.id, delegation.agent_execution_id, "completed")
    # Revoked when the step ended; the unused budget went back to the run.
    assert grant.revoked_at is not None
    assert (delegation.end_reason, delegation.holder) == ("finished", "")
    assert used(f"grant:{grant.id}") == 2  # closed: nothing more is ever taken from it
    assert used(run_counter(world, result)) == 1  # the one call the sub-agent made
    kinds = list(AuditEvent.objects.filter(kind__startswith="grant.").order_by("at", "id")
                 .values_list("kind", "details__grant_id"))
    assert ("grant.delegated", grant.id) in kinds and ("grant.revoked", grant.id) in kinds
    # Replaying the run answers from its journal: no second child grant, no second call.
    again = run(world, checked(delegated_workflow()), scripted(lookup()), result.execution_id)
    assert again.state == "finished"
    assert Grant.objects.filter(parent=crm_grant(world)).count() == 1
    assert Operation.objects.count() == 1


def test_the_sub_agent_is_held_to_its_delegated_scope_and_operations(world: World) -> None:
    result = run(world, checked(delegated_workflow()), scripted(
        lookup("cus-002"),
        {"call": "payments.transfer", "arguments": {
            "from_account": "acct-001", "to_account": "acct-999", "amount": "1.00",
            "currency": "EUR"}},
        lookup("cus-001")))
    assert result.state == "finished"
    assert calls(result) == [("denied", "scope_violation"), ("denied", "tool_not_permitted"),
                             ("completed", None)]
    assert only_delegation().grant.revoked_at is not None


@pytest.mark.parametrize(("operations", "scope", "authority", "widened"), [
    # The workflow declares acct-002, the principal's grant holds acct-001 only.
    ("[payments.transfer]", "{account: [acct-002]}",
     "[{operations: [payments.transfer], scope: {account: [acct-001, acct-002]}}]", "scope"),
    # No one grant of the principal holds both operations.
    ("[crm.lookup, payments.transfer]", "{customer: [cus-001], account: [acct-001]}",
     "[{operations: [crm.lookup, payments.transfer], "
     "scope: {customer: '*', account: [acct-001]}}]", "operations"),
], ids=["scope", "operations"])
def test_a_step_delegating_more_than_its_principal_holds_is_refused_delegation_widens(
    world: World, operations: str, scope: str, authority: str, widened: str,
) -> None:
    principals = Principal.objects.count()
    workflow = checked(delegated_workflow(operations=operations, scope=scope,
                                          authority=authority,
                                          effects="[read, human, external_write, "
                                                  "financial_write]"))
    result = run(world, workflow, scripted())
    assert result.state == "denied"
    assert result.denial is not None and result.denial.code == "delegation_widens"
    assert widened in result.denial.detail
    # Nothing of the delegation exists: no grant, no principal, no record, no carve-out.
    assert not Grant.objects.filter(parent__isnull=False).exists()
    assert Principal.objects.count() == principals
    assert not Delegation.objects.exists()
    assert not BudgetCounter.objects.filter(key=run_counter(world, result)).exists()


# --- the budget ---------------------------------------------------------------------------------


def test_the_sub_agent_cannot_spend_past_its_carve_out(world: World) -> None:
    result = run(world, checked(delegated_workflow(budget=2)),
                 scripted(lookup(), lookup(), lookup()))
    assert calls(result) == [("completed", None), ("completed", None),
                             ("denied", "budget_exhausted")]
    grant = only_delegation().grant
    assert used(f"grant:{grant.id}") == 2
    assert used(run_counter(world, result)) == 2
    assert Operation.objects.count() == 2


LOOKUPS_FIRST = """  - propose: crm.lookup
    args: {customer_id: cus-001}
    bind: first
  - dispatch: $first
  - propose: crm.lookup
    args: {customer_id: cus-002}
    bind: second
  - dispatch: $second
"""


def hour_counter(world: World, delegation: Delegation) -> str:
    return f"principal:{world.owner.id}:{delegation.started_at:%Y%m%d%H}"


def test_the_carve_out_is_reserved_out_of_the_delegators_hour_and_its_rest_given_back(
    world: World,
) -> None:
    result = run(world, checked(delegated_workflow(budget=2)), scripted(lookup()))
    assert calls(result) == [("completed", None)]
    # 2 reserved when the step started, 1 given back to that hour's counter when it ended.
    assert used(hour_counter(world, only_delegation())) == 1


def test_a_sub_agent_cannot_spend_past_its_delegators_hourly_budget(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL = 3  # the workflow's own steps spend 2 of them
    result = run(world, checked(delegated_workflow(budget=2, before=LOOKUPS_FIRST)),
                 scripted(lookup(), lookup(), final="done"))
    assert result.state == "denied"
    assert result.denial is not None
    assert (result.denial.path, result.denial.code) == ("steps[4]", "budget_exhausted")
    assert result.denial.detail == {"budget": "principal"}
    assert not Delegation.objects.exists()
    assert Operation.objects.count() == 2


@pytest.mark.parametrize(("budget", "state"), [(1, "finished"), (2, "denied")])
def test_a_carve_out_larger_than_the_run_has_left_is_refused(
    world: World, settings: Any, budget: int, state: str,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 3  # the run spends 2 before the agent step
    workflow = checked(delegated_workflow(budget=budget, before=LOOKUPS_FIRST))
    result = run(world, workflow, scripted(lookup(), final="done"))
    assert result.state == state
    if state == "denied":
        assert result.denial is not None
        assert (result.denial.path, result.denial.code) == ("steps[4]", "budget_exhausted")
        assert not Delegation.objects.exists()
        assert not Grant.objects.filter(parent__isnull=False).exists()
        assert used(run_counter(world, result)) == 2
    else:
        assert calls(result) == [("completed", None)]
        assert used(run_counter(world, result)) == 3


@pytest.mark.parametrize(("budget", "state"), [(1, "finished"), (2, "denied")])
def test_a_carve_out_larger_than_the_runs_scope_has_left_is_refused_naming_the_scope(
    world: World, budget: int, state: str,
) -> None:
    """A delegated step cannot evade the ceilings its run was given: its budget is carved out
    of the run's innermost scope's tool calls too, refused naming the scope when the scope has
    less left, and what the sub-agent did not spend goes back to the scope."""
    from dispatch.models import Scope
    from dispatch.services.ceilings import Ceiling, scope_remaining

    workflow = checked(delegated_workflow(budget=budget, before=LOOKUPS_FIRST))
    result = run_workflow(workflow, principal=world.owner, now=world.now,
                          agents=scripted(lookup(), final="done"),
                          ceiling=Ceiling(calls=3, attempts=10, concurrency=4))
    scope = Scope.objects.get(execution_id=result.execution_id)
    assert result.state == state
    if state == "denied":
        assert result.denial is not None
        assert (result.denial.path, result.denial.code) == ("steps[4]", "budget_exhausted")
        assert result.denial.detail == {"budget": "calls", "scope": "run", "scope_id": scope.id,
                                        "asked": 2, "remaining": 1}
        assert not Delegation.objects.exists()
        assert not Grant.objects.filter(parent__isnull=False).exists()
        assert scope_remaining(scope.id)["calls"] == 1  # the refused carve-out took nothing
    else:
        assert calls(result) == [("completed", None)]
        assert scope_remaining(scope.id)["calls"] == 0  # 2 steps, 1 carved and spent


def test_the_unused_part_of_a_carve_out_goes_back_to_the_runs_scope(world: World) -> None:
    from dispatch.models import Scope
    from dispatch.services.ceilings import Ceiling, scope_remaining

    result = run_workflow(checked(delegated_workflow(budget=3)), principal=world.owner,
                          now=world.now, agents=scripted(lookup(), final="done"),
                          ceiling=Ceiling(calls=5, attempts=10, concurrency=4))
    assert calls(result) == [("completed", None)]
    scope = Scope.objects.get(execution_id=result.execution_id)
    # 3 carved when the step started; the sub-agent spent 1, the other 2 came back.
    assert scope_remaining(scope.id)["calls"] == 4


def test_a_second_open_of_a_step_finds_its_record_before_carving_anything(
    world: World, settings: Any,
) -> None:
    """What a concurrent run of the execution meets once the first one committed (the race
    itself: tests/concurrency/test_delegation_races.py): the record, not `budget_exhausted`
    from a second carve-out the run's budget cannot hold."""
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 3
    run_id = execution_create(principal=world.owner, adapter="workflow:x", now=world.now).id
    bounds = Bounds(["crm.lookup"], {"customer": ["cus-001"]}, 600, 2)
    sub = SubAgent(AGENT, ["crm.lookup"], "scripted", {}, "sha256:x", {})
    first, second = (
        delegation_open(principal=world.owner, execution_id=run_id, step="steps[0]",
                        bounds=bounds, sub=sub, holder=holder, now=timezone.now())
        for holder in ("lse_A", "lse_B"))
    assert (second.id, second.holder) == (first.id, "lse_A")
    assert used(f"execution:{world.owner.id}:{run_id}") == 2
    assert Grant.objects.filter(parent__isnull=False).count() == 1


# --- however the step ends ------------------------------------------------------------------------


class FailingModel:
    """A model adapter whose provider fails on its second turn."""

    name = "failing"
    max_tokens_per_call = None

    def config(self) -> dict[str, Any]:
        return {}

    def next_action(self, transcript: Sequence[Mapping[str, Any]],
                    tools: Sequence[ToolSpec]) -> ToolCall | FinalAnswer:
        if any(entry["kind"] == "tool_call" for entry in transcript):
            raise RuntimeError("the model provider is down")
        return ToolCall("crm.lookup", {"customer_id": "cus-001"})


def test_the_child_grant_is_revoked_when_the_step_raises(world: World) -> None:
    with pytest.raises(RuntimeError, match="provider is down"):
        run_workflow(checked(delegated_workflow()), principal=world.owner,
                     agents={AGENT: FailingModel()}, now=world.now)
    delegation = only_delegation()
    assert delegation.end_reason == "raised"
    assert delegation.grant.revoked_at is not None
    execution = Execution.objects.get(id=delegation.execution_id)
    assert used(f"execution:{world.owner.id}:{execution.id}") == 1  # 2 carved, 1 given back


EMAIL_CALLS = (
    {"call": "resources.create", "name": "reply", "arguments": {"kind": "email_draft", "payload": {
        "from": MAILBOX, "to": ["ada@example.com"], "subject": "Tier", "body": "Gold."}}},
    {"call": "email.send", "arguments": {"draft": {"$result": "reply"}}},
)
EMAIL_STEP = {
    "operations": "[email.send]", "scope": f"{{mailbox: [{MAILBOX}]}}",
    "authority": f"[{{operations: [email.send], scope: {{mailbox: [{MAILBOX}]}}}}]",
    "effects": "[human, external_write]"}


def test_a_sub_agent_waiting_for_a_human_parks_the_step_and_resumes_under_the_same_grant(
    live: World, destinations: Destinations,
) -> None:
    workflow = checked(delegated_workflow(**EMAIL_STEP))
    first = run(live, workflow, scripted(*EMAIL_CALLS, final="sent"))
    assert (first.state, first.waiting_on) == ("waiting", "steps[0]")
    delegation = only_delegation()
    assert delegation.ended_at is None and delegation.lease_expires_at is None
    assert delegation.grant.revoked_at is None  # live while its sub-agent waits
    # Parked, not lapsed: reconciliation leaves a waiting step alone.
    later = timezone.now() + timedelta(seconds=settings.DELEGATION_LEASE_SECONDS + 60)
    assert reconcile_delegations(now=later) == 0
    # Decided on the wall clock, the delegation's clock (the grant's validity starts then).
    proposal = Proposal.objects.get(principal=delegation.principal)
    approval_decide(approver=live.approver, approval_id=proposal.approval.id,
                    decision="grant", digest=proposal.digest, now=timezone.now())
    done = run(live, workflow, scripted(*EMAIL_CALLS, final="sent"), first.execution_id)
    assert done.state == "finished", done
    assert calls(done)[-1] == ("completed", None)
    delegation.refresh_from_db()
    assert delegation.end_reason == "finished"
    assert Grant.objects.get(id=delegation.grant_id).revoked_at is not None
    assert Grant.objects.filter(parent__isnull=False).count() == 1
    assert Operation.objects.get().state == "completed"


def test_the_delegated_grant_cannot_be_delegated_further_without_a_budget(
    live: World, destinations: Destinations,
) -> None:
    run(live, checked(delegated_workflow(**EMAIL_STEP)),
        scripted(*EMAIL_CALLS, final="sent"))
    delegation = only_delegation()
    with pytest.raises(Denial) as refused:
        grant_delegate(actor=delegation.principal, grant_id=delegation.grant_id,
                       subject_name=live.owner.name, operations=["email.send"],
                       scope={"mailbox": [MAILBOX]},
                       expires_at=delegation.grant.expires_at, now=timezone.now())
    assert refused.value.code.value == "delegation_widens"
    assert refused.value.details["budget"] == {"requested": None, "parent": 2}


def test_reconciliation_revokes_the_grant_of_a_step_whose_run_ended(
    live: World, destinations: Destinations,
) -> None:
    result = run(live, checked(delegated_workflow(**EMAIL_STEP)),
                 scripted(*EMAIL_CALLS, final="sent"))
    delegation = only_delegation()
    execution_move(Execution.objects.get(id=result.execution_id), ExecutionEvent.FINISH,
                   now=timezone.now(), actor="test")
    assert reconcile_delegations(now=timezone.now()) == 1
    delegation.refresh_from_db()
    assert delegation.end_reason == "run_ended"
    assert Grant.objects.get(id=delegation.grant_id).revoked_at is not None
    # The sub-agent's pending proposal can no longer be granted into a permit.
    proposal = Proposal.objects.get(principal=delegation.principal)
    with pytest.raises(Denial) as refused:
        approval_decide(approver=live.approver, approval_id=proposal.approval.id,
                        decision="grant", digest=proposal.digest, now=timezone.now())
    assert refused.value.code.value == "authority_revoked"
    assert used(run_counter(live, result)) == 0  # the whole carve-out came back
    assert reconcile_delegations(now=timezone.now()) == 0  # once


def test_reconciliation_ends_a_parked_step_whose_grant_was_revoked(
    live: World, destinations: Destinations,
) -> None:
    result = run(live, checked(delegated_workflow(**EMAIL_STEP)),
                 scripted(*EMAIL_CALLS, final="sent"))
    assert result.state == "waiting"
    delegation = only_delegation()
    # The workflow principal's own grant is revoked: the child with it (docs/design.md#denials).
    grant_revoke(actor=live.admin, grant_id=delegation.grant.parent_id, now=timezone.now())
    assert reconcile_delegations(now=timezone.now()) == 1
    delegation.refresh_from_db()
    assert delegation.end_reason == "revoked"
    assert used(run_counter(live, result)) == 0  # the carve-out came back at once
    # Revoked once, by the admin; the end adds no second revocation.
    assert AuditEvent.objects.filter(kind="grant.revoked").count() == 1
    assert reconcile_delegations(now=timezone.now()) == 0



class ReconcilingModel:
    """A sub-agent whose second turn comes with a reconciliation beat (on the wall clock)."""

    name = "reconciling"
    max_tokens_per_call = None

    def __init__(self) -> None:
        self.beats: list[int] = []

    def config(self) -> dict[str, Any]:
        return {}

    def next_action(self, transcript: Sequence[Mapping[str, Any]],
                    tools: Sequence[ToolSpec]) -> ToolCall | FinalAnswer:
        made = sum(1 for entry in transcript if entry["kind"] == "tool_call")
        if made == 1:
            self.beats.append(reconcile_delegations(now=timezone.now()))
        if made < 2:
            return ToolCall("crm.lookup", {"customer_id": "cus-001"})
        return FinalAnswer('"done"')


def test_a_step_starting_long_after_its_run_delegates_from_its_own_start(world: World) -> None:
    """One clock: the grant is issued when the step starts, not at the run's `now`."""
    model = ReconcilingModel()
    before = timezone.now()
    result = run_workflow(checked(delegated_workflow(expires_in=30)), principal=world.owner,
                          agents={AGENT: model}, now=before - timedelta(seconds=50))
    assert result.state == "finished", result
    assert calls(result) == [("completed", None), ("completed", None)]
    assert model.beats == [0]  # nothing to reconcile mid-step: the grant is live
    delegation = only_delegation()
    assert delegation.end_reason == "finished"
    assert delegation.started_at >= before
    assert delegation.grant.expires_at == delegation.started_at + timedelta(seconds=30)


# --- before any step ------------------------------------------------------------------------------


def test_a_delegated_agent_without_a_model_adapter_is_refused_before_any_step(
    world: World,
) -> None:
    with pytest.raises(WorkflowRefused) as refused:
        run(world, checked(delegated_workflow()), {})
    assert refused.value.code == "input_invalid"
    assert not Execution.objects.exists()


def test_a_sub_agent_resumes_only_under_the_configuration_it_started_with(
    live: World, destinations: Destinations,
) -> None:
    workflow = checked(delegated_workflow(**EMAIL_STEP))
    first = run(live, workflow, scripted(*EMAIL_CALLS, final="sent"))
    assert first.state == "waiting"
    with pytest.raises(WorkflowRefused) as refused:
        run(live, workflow, scripted(*EMAIL_CALLS, final="something else"), first.execution_id)
    assert refused.value.code == "execution_mismatch"
    assert only_delegation().grant.revoked_at is None  # refused before the step: untouched


def test_the_command_runs_a_delegated_step_with_a_scripted_sub_agent(
    world: World, tmp_path: Path,
) -> None:
    workflow, sub_agent = tmp_path / "delegated.yaml", tmp_path / "researcher.json"
    workflow.write_text(delegated_workflow())
    sub_agent.write_text(json.dumps(script(lookup())))
    out = io.StringIO()
    call_command("run_workflow", str(workflow), "--agent", world.owner.name,
                 "--sub-agent", f"{AGENT}={sub_agent}", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "finished"
    assert lines[1].startswith("steps[0]: agent completed delegation_id=dlg_")
    assert only_delegation().grant.revoked_at is not None


@pytest.mark.parametrize(("lease", "errors"), [(61.0, []), (60.0, ["dispatch.E003"])])
def test_a_lease_shorter_than_the_longest_handler_call_fails_a_system_check(
    settings: Any, lease: float, errors: list[str],
) -> None:
    # The longest registered call: 15 s x 3 attempts (payments.transfer), plus a 15 s margin.
    from dispatch.apps import check_delegation_lease

    settings.DELEGATION_LEASE_SECONDS = lease
    assert [e.id for e in check_delegation_lease()] == errors


# --- how long a delegation may last -----------------------------------------------------------

#: Within the longest span a date can hold (so the checker lets it by), beyond 9999-12-31 from
#: now: only the step's own clock tells that no date can hold its expiry.
CENTURIES = 3 * 10**11


def test_a_step_whose_expiry_no_date_can_hold_is_denied_not_an_overflow(world: World) -> None:
    result = run(world, checked(delegated_workflow(expires_in=CENTURIES)), scripted())
    assert result.state == "denied"
    assert result.denial is not None and result.denial.code == "schema_invalid"
    assert "9999-12-31" in str(result.denial.detail)
    assert not Delegation.objects.exists()
    assert not Grant.objects.filter(parent__isnull=False).exists()


@pytest.mark.parametrize("expires_in", [7200, CENTURIES])
def test_a_step_outlasting_its_parent_grant_is_refused(world: World, expires_in: int) -> None:
    """The principal's only crm grant expires in an hour: a child valid for longer widens it
    (and one no date can hold is refused before any grant is read)."""
    grant_revoke(actor=world.admin, grant_id=crm_grant(world).id, now=world.now)
    grant_issue(issuer=world.admin, subject=world.owner, operations=["crm.lookup"],
                scope={"customer": "*"}, now=timezone.now(), expires_in=3600)
    result = run(world, checked(delegated_workflow(expires_in=expires_in)), scripted())
    assert result.state == "denied"
    assert result.denial is not None
    assert result.denial.code == ("delegation_widens" if expires_in == 7200
                                  else "schema_invalid")
    assert not Delegation.objects.exists()


def test_an_open_beyond_any_date_is_refused_with_nothing_written(world: World) -> None:
    execution = execution_create(principal=world.owner, adapter="scripted", now=world.now)
    with pytest.raises(Denial) as refused:
        delegation_open(
            principal=world.owner, execution_id=execution.id, step="steps[0]",
            bounds=Bounds(["crm.lookup"], {"customer": ["cus-001"]}, 10**30, 1),
            sub=SubAgent(AGENT, ["crm.lookup"], "scripted", {}, "fp", {}), holder="lse_1",
            now=world.now)
    assert refused.value.code == "schema_invalid"
    assert refused.value.details["errors"] == [
        {"pointer": "/delegate/expires_in", "message": TOO_LATE}]
    assert not Delegation.objects.exists()
