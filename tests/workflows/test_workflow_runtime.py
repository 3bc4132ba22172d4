"""The embedded workflow runtime (docs/workflows.md#running-workflows-embedded-runtime): a checked
workflow runs through the same dispatcher, and a certificate is not authorization: the runtime
checks still decide."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from demo.destinations.runner import list_all
from dispatch.models import (
    AuditEvent,
    Execution,
    Operation,
    Proposal,
    Resource,
    Revision,
    TranscriptEntry,
)
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_issue, grant_revoke
from dispatch.services.resources import revision_create
from dispatch.workflows import WorkflowRefused, WorkflowRun, run_workflow
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

HERE = Path(__file__).parent
OK, RUNTIME = HERE / "ok", HERE / "runtime"


def checked(path: Path) -> CheckedWorkflow:
    result = check_source(path.read_text(encoding="utf-8"), get_runtime().registry,
                          filename=str(path))
    assert isinstance(result, CheckedWorkflow), result
    return result


def run(world: World, workflow: CheckedWorkflow, execution_id: str | None = None,
        **inputs: Any) -> WorkflowRun:
    return run_workflow(workflow, principal=world.owner, execution_id=execution_id,
                        inputs=inputs or None, now=world.now)


def statuses(result: WorkflowRun) -> list[tuple[str, str, str]]:
    return [(o.path, o.step, o.status) for o in result.outcomes]


def deny(world: World, proposal: Proposal, reason: str) -> None:
    approval_decide(approver=world.approver, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason=reason, now=world.now)


def email_grant(world: World) -> Any:
    return world.owner.grants.get(operations=["email.send"])


# --- the happy path -------------------------------------------------------------------------------


def test_checked_workflow_waits_for_the_operator_then_sends_exactly_once(
    live: World, destinations: Destinations,
) -> None:
    workflow = checked(RUNTIME / "send_email.yaml")
    first = run(live, workflow)
    assert (first.state, first.waiting_on) == ("waiting", "steps[2]")
    assert statuses(first) == [("steps[0]", "create", "created"),
                               ("steps[1]", "propose", "proposed"),
                               ("steps[2]", "request_approval", "pending")]
    proposal = Proposal.objects.get(execution_id=first.execution_id)
    assert proposal.call_id == "steps[1]"
    # The approval window of `expires: 600` was set when proposing (never lengthened).
    assert (proposal.approval.expires_at - live.now).total_seconds() == 600
    assert Execution.objects.get(id=first.execution_id).state == "waiting"

    # Re-running while the human has not decided proposes nothing new and sends nothing.
    again = run(live, workflow, first.execution_id)
    assert again.state == "waiting"
    assert Proposal.objects.filter(execution_id=first.execution_id).count() == 1
    assert Resource.objects.filter(created_by=live.owner).count() == 1

    live.grant(proposal)
    done = run(live, workflow, first.execution_id)
    assert done.state == "finished", done
    assert statuses(done)[2:] == [("steps[2]", "request_approval", "granted"),
                                  ("steps[3]", "match", "granted"),
                                  ("steps[3].arms.Granted[0]", "dispatch", "completed"),
                                  ("steps[3].arms.Granted[1]", "match", "completed")]
    assert "message_id" in done.outcomes[4].detail["result"]
    sent = list_all(destinations.directory)["email"]
    assert len(sent) == 1
    assert (sent[0]["to"], sent[0]["subject"]) == (["ada@example.com"], "Your refund")
    assert Resource.objects.get(created_by=live.owner).state == "sent"
    assert Execution.objects.get(id=first.execution_id).state == "finished"

    # A finished run answers from its journal: nothing is proposed or sent again.
    replayed = run(live, workflow, first.execution_id)
    assert replayed == done
    assert len(list_all(destinations.directory)["email"]) == 1
    assert Proposal.objects.count() == 1 and Operation.objects.count() == 1


def test_conformance_file_with_an_input_draft_runs(live: World,
                                                   destinations: Destinations) -> None:
    workflow = checked(OK / "refund_email.yaml")
    draft = live.draft()
    first = run(live, workflow, draft=draft.id)
    assert first.state == "waiting"
    live.grant(Proposal.objects.get(execution_id=first.execution_id))
    # Resuming needs only the execution id: the inputs were pinned by the first run.
    done = run(live, workflow, first.execution_id)
    assert done.state == "finished"
    assert [o.status for o in done.outcomes if o.step == "dispatch"] == ["completed"]
    assert len(list_all(destinations.directory)["email"]) == 1


def test_read_without_approval_and_a_loop_of_fresh_proposals(live: World) -> None:
    lookup = run(live, checked(OK / "crm_lookup_no_approval.yaml"), customer="cus-001")
    assert lookup.state == "finished"
    assert statuses(lookup) == [("steps[0]", "propose", "proposed"),
                                ("steps[1]", "dispatch", "completed"),
                                ("steps[2]", "match", "completed")]
    assert lookup.outcomes[1].detail["result"]["name"] == "Ada Lovelace"

    each = run(live, checked(OK / "loop_fresh_proposals.yaml"), customers=["cus-001", "cus-404"])
    assert each.state == "finished"
    # Each iteration is its own step (path@iteration); an unknown customer is a typed
    # definite failure, not a refusal.
    assert [(o.path, o.status) for o in each.outcomes if o.step == "dispatch"] == [
        ("steps[0].do[1]@1", "completed"), ("steps[0].do[1]@2", "failed_no_effect")]
    assert each.outcomes[-1].detail["error"]
    calls = Proposal.objects.filter(execution_id=each.execution_id).values_list(
        "call_id", "arguments")
    assert sorted(calls) == [("steps[0].do[0]@1", {"customer_id": "cus-001"}),
                             ("steps[0].do[0]@2", {"customer_id": "cus-404"})]


def test_if_on_a_bool_input_takes_one_branch(world: World) -> None:
    workflow = checked(OK / "if_both_edit.yaml")
    for formal, subject in ((True, "Dear customer"), (False, "Hi")):
        draft = world.draft()
        result = run(world, workflow, draft=draft.id, formal=formal)
        assert result.state == "finished"
        branch = "then" if formal else "else"
        assert statuses(result) == [("steps[0]", "if", branch),
                                    (f"steps[0].{branch}[0]", "edit", "edited"),
                                    ("steps[1]", "propose", "proposed")]
        revision = Revision.objects.get(resource_id=draft.id, number=2)
        assert revision.payload["subject"] == subject
        proposal = Proposal.objects.get(execution_id=result.execution_id)
        assert proposal.arguments == {"draft": {"id": draft.id, "revision": 2}}


# --- the certificate is not authorization: the runtime still decides -----------------------------


def test_grant_revoked_after_checking_is_an_authority_revoked_outcome(world: World) -> None:
    workflow = checked(OK / "refund_email.yaml")
    first = run(world, workflow, draft=world.draft().id)
    world.grant(Proposal.objects.get(execution_id=first.execution_id))
    grant_revoke(actor=world.admin, grant_id=email_grant(world).id, now=world.now)

    result = run(world, workflow, first.execution_id)
    assert result.state == "denied"
    assert result.denial is not None
    assert (result.denial.path, result.denial.step, result.denial.code) == (
        "steps[2].arms.Granted[0]", "dispatch", "authority_revoked")
    assert result.outcomes[-1] == result.denial
    assert not Operation.objects.exists()
    assert AuditEvent.objects.filter(kind="dispatch.denied",
                                     details__code="authority_revoked").count() == 1
    # The denial is final for this execution: a re-run replays it and asks nothing again.
    assert run(world, workflow, first.execution_id) == result
    assert AuditEvent.objects.filter(kind="dispatch.denied").count() == 1


def test_grant_revoked_before_proposing_denies_the_proposal(world: World) -> None:
    grant_revoke(actor=world.admin, grant_id=email_grant(world).id, now=world.now)
    result = run(world, checked(OK / "refund_email.yaml"), draft=world.draft().id)
    assert result.state == "denied"
    assert result.denial is not None
    assert (result.denial.step, result.denial.code) == ("propose", "authority_revoked")
    assert not Proposal.objects.exists()


def test_draft_edited_by_someone_else_before_dispatch_is_stale(world: World) -> None:
    workflow = checked(OK / "refund_email.yaml")
    draft = world.draft()
    first = run(world, workflow, draft=draft.id)
    world.grant(Proposal.objects.get(execution_id=first.execution_id))
    # An admin: only the creator or an admin may revise a resource.
    revision_create(principal=world.admin, resource_id=draft.id, base_revision=1, payload={
        "from": "support@acme.example", "to": ["someone-else@example.com"], "subject": "Hi",
        "body": "Changed after approval."}, now=world.now)

    result = run(world, workflow, first.execution_id)
    assert result.state == "denied"
    assert result.denial is not None
    assert (result.denial.step, result.denial.code) == ("dispatch", "stale_revision")
    assert not Operation.objects.exists()


def test_operator_denial_runs_the_denied_arm(live: World, destinations: Destinations) -> None:
    workflow = checked(OK / "denied_then_repropose.yaml")
    draft = live.draft()
    first = run(live, workflow, draft=draft.id)
    deny(live, Proposal.objects.get(execution_id=first.execution_id), "too curt")

    second = run(live, workflow, first.execution_id)
    assert (second.state, second.waiting_on) == ("waiting", "steps[2].arms.Denied[2]")
    assert statuses(second)[1:] == [
        ("steps[1]", "request_approval", "rejected"),
        ("steps[2]", "match", "denied"),
        ("steps[2].arms.Denied[0]", "edit", "edited"),
        ("steps[2].arms.Denied[1]", "propose", "proposed"),
        ("steps[2].arms.Denied[2]", "request_approval", "pending")]
    assert second.outcomes[1].detail["reason"] == "too curt"
    proposals = Proposal.objects.filter(execution_id=first.execution_id).order_by("created_at",
                                                                                  "call_id")
    assert [p.call_id for p in proposals] == ["steps[0]", "steps[2].arms.Denied[1]"]
    retry = proposals.get(call_id="steps[2].arms.Denied[1]")
    assert retry.arguments == {"draft": {"id": draft.id, "revision": 2}}

    live.grant(retry)
    done = run(live, workflow, first.execution_id)
    assert done.state == "finished"
    [sent] = list_all(destinations.directory)["email"]
    assert sent["body"] == "Better"


def test_changed_contract_is_refused_before_any_step(
    world: World, changed_handler: Callable[[], None],
) -> None:
    workflow = checked(RUNTIME / "send_email.yaml")
    changed_handler()
    assert not workflow.binds(get_runtime().registry)
    with pytest.raises(WorkflowRefused) as refused:
        run(world, workflow)
    assert refused.value.code == "contract_mismatch"
    assert "email.send" in refused.value.message
    assert not Execution.objects.exists()
    assert not Resource.objects.exists() and not Proposal.objects.exists()


def test_contract_changed_while_waiting_refuses_the_resume(
    world: World, changed_handler: Callable[[], None],
) -> None:
    workflow = checked(OK / "refund_email.yaml")
    first = run(world, workflow, draft=world.draft().id)
    world.grant(Proposal.objects.get(execution_id=first.execution_id))
    changed_handler()
    with pytest.raises(WorkflowRefused) as refused:
        run(world, workflow, first.execution_id)
    assert refused.value.code == "contract_mismatch"
    # Checking again against the new contract does not carry the old approval over.
    with pytest.raises(WorkflowRefused) as again:
        run(world, checked(OK / "refund_email.yaml"), first.execution_id)
    assert again.value.code == "execution_mismatch"
    assert not Operation.objects.exists()


def test_values_outside_the_declared_authority_are_denied(world: World) -> None:
    # The principal may send from sales@, but the workflow declares support@ only; the checker
    # could not see the input draft's sender, the runtime does.
    grant_issue(issuer="admin", subject=world.owner, operations=["email.send"],
                scope={"mailbox": ["sales@acme.example"]}, now=world.now)
    draft = world.draft(sender="sales@acme.example")
    result = run(world, checked(OK / "refund_email.yaml"), draft=draft.id)
    assert result.state == "denied"
    assert result.denial is not None
    assert (result.denial.step, result.denial.code) == ("propose", "scope_violation")
    assert not Proposal.objects.exists()


def test_a_refusal_inside_try_runs_the_catch(live: World) -> None:
    grant_revoke(actor=live.admin, grant_id=email_grant(live).id, now=live.now)
    result = run(live, checked(RUNTIME / "try_catch_read.yaml"), draft=live.draft().id,
                 customer="cus-001")
    assert result.state == "finished"
    assert [(o.path, o.step, o.status, o.code) for o in result.outcomes] == [
        ("steps[0].try[0]", "propose", "denied", "authority_revoked"),
        ("steps[0]", "try", "caught", "authority_revoked"),
        ("steps[0].catch[0]", "propose", "proposed", None),
        ("steps[0].catch[1]", "dispatch", "completed", None)]


# --- gates and durability -------------------------------------------------------------------------


def test_a_plain_workflow_is_not_runnable(world: World) -> None:
    workflow = checked(RUNTIME / "send_email.yaml")
    with pytest.raises(TypeError, match="CheckedWorkflow"):
        run_workflow(workflow.workflow, principal=world.owner, now=world.now)  # type: ignore[arg-type]
    assert not Execution.objects.exists()


def test_a_run_missing_an_input_is_refused_up_front(world: World) -> None:
    """Concurrent steps run (tests/workflows/test_concurrent_steps.py); a refusal to start still
    happens before any step: no execution."""
    workflow = checked(OK / "parallel_disjoint.yaml")
    with pytest.raises(WorkflowRefused) as refused:
        run_workflow(workflow, principal=world.owner, inputs=None, now=world.now)
    assert refused.value.code == "input_invalid"
    assert "input `first` is required" in refused.value.message
    assert not Execution.objects.exists()


def test_inputs_are_checked_and_pinned(world: World) -> None:
    workflow = checked(OK / "refund_email.yaml")
    with pytest.raises(WorkflowRefused, match="input `draft` is required"):
        run(world, workflow)
    with pytest.raises(WorkflowRefused, match="no resource"):
        run(world, workflow, draft="res_forged")
    outsiders = World(world.outsider, "", world.outsider_operator, world.admin, world.owner,
                      world.approver, world.now).draft(sender="ops@globex.example")
    with pytest.raises(WorkflowRefused, match="no resource"):
        run(world, workflow, draft=outsiders.id)
    first = run(world, workflow, draft=world.draft().id)
    with pytest.raises(WorkflowRefused) as other:
        run(world, workflow, first.execution_id, draft=world.draft().id)
    assert other.value.code == "execution_mismatch"
    with pytest.raises(WorkflowRefused) as wrong_workflow:
        run(world, checked(RUNTIME / "send_email.yaml"), first.execution_id)
    assert wrong_workflow.value.code == "execution_mismatch"


def test_crash_between_proposal_and_journal_never_proposes_twice(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dispatch.workflows import journal

    workflow = checked(OK / "refund_email.yaml")
    real_put = journal.Journal.put

    def crash_after_proposal(self: Any, key: str, payload: dict[str, Any], now: Any,
                             **kw: Any) -> Any:
        if key == "steps[0]" and kw.get("kind", "tool_result") == "tool_result":
            raise KeyboardInterrupt("crash: the proposal committed, its journal entry not")
        return real_put(self, key, payload, now, **kw)

    monkeypatch.setattr(journal.Journal, "put", crash_after_proposal)
    with pytest.raises(KeyboardInterrupt):
        run(world, workflow, draft=world.draft().id)
    monkeypatch.setattr(journal.Journal, "put", real_put)
    [execution] = Execution.objects.all()
    [proposal] = Proposal.objects.filter(execution_id=execution.id)

    resumed = run(world, workflow, execution.id)
    assert resumed.state == "waiting"
    assert resumed.outcomes[0].detail["proposal_id"] == proposal.id
    assert Proposal.objects.count() == 1
    assert TranscriptEntry.objects.filter(execution=execution, call_id="steps[0]").count() == 1


def test_crash_between_edit_and_journal_adopts_the_revision_it_made(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dispatch.workflows import journal

    workflow = checked(OK / "edit_then_propose.yaml")
    draft = world.draft()
    real_put = journal.Journal.put

    def crash_after_edit(self: Any, key: str, payload: dict[str, Any], now: Any,
                         **kw: Any) -> Any:
        if key == "steps[0]" and kw.get("kind", "tool_result") == "tool_result":
            raise KeyboardInterrupt("crash: the revision committed, its journal entry not")
        return real_put(self, key, payload, now, **kw)

    monkeypatch.setattr(journal.Journal, "put", crash_after_edit)
    with pytest.raises(KeyboardInterrupt):
        run(world, workflow, draft=draft.id)
    monkeypatch.setattr(journal.Journal, "put", real_put)
    [execution] = Execution.objects.all()

    # The edit's intent was journaled first: the re-run recognises its own revision 2 instead
    # of editing again (which the compare-and-swap would refuse as stale).
    resumed = run(world, workflow, execution.id)
    assert resumed.state == "waiting"
    assert resumed.outcomes[0].detail["revision"] == 2
    assert Revision.objects.filter(resource_id=draft.id).count() == 2
    assert Proposal.objects.get().arguments == {"draft": {"id": draft.id, "revision": 2}}


def test_deployment_policy_narrowed_after_checking_refuses_up_front(
    live: World, policy: Callable[[list[str]], None],
) -> None:
    send = checked(RUNTIME / "send_email.yaml")
    lookup = checked(OK / "crm_lookup_no_approval.yaml")
    policy(["read", "human"])
    # The contracts are unchanged (the certificate still binds), the deployment is not.
    assert send.binds(get_runtime().registry)
    with pytest.raises(WorkflowRefused) as refused:
        run(live, send)
    assert refused.value.code == "effect_not_permitted"
    assert "external_write" in refused.value.message
    assert not Execution.objects.exists() and not Resource.objects.exists()
    assert run(live, lookup, customer="cus-001").state == "finished"


# --- manage.py run_workflow -----------------------------------------------------------------------


def test_command_checks_runs_waits_and_resumes(world: World) -> None:
    path = str(OK / "refund_email.yaml")
    draft = world.draft()
    out = io.StringIO()
    call_command("run_workflow", path, "--agent", "owner", "--input", f"draft={draft.id}",
                 stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("execution exe_")
    assert lines[-1] == "waiting"
    assert any(line.startswith("steps[0]: propose proposed proposal_id=") for line in lines)
    execution_id = lines[0].split()[1]
    deny(world, Proposal.objects.get(execution_id=execution_id), "no")

    out = io.StringIO()
    call_command("run_workflow", path, "--agent", "owner", "--execution", execution_id,
                 stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[2].startswith("steps[1]: request_approval rejected proposal_id=prp_")
    assert lines[2].endswith(" reason=no")
    assert lines[3] == "steps[2]: match denied"
    assert lines[-1] == "finished"


def test_command_prints_diagnostics_and_runs_nothing_when_the_check_fails(
    world: World,
) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("run_workflow", str(HERE / "err" / "e005_bool_if_dispatch.yaml"),
                     "--agent", "owner", stdout=out)
    assert failed.value.returncode == 1
    assert "error[AGL-E005]" in out.getvalue()
    assert not Execution.objects.exists()


def test_command_reports_a_refusal(world: World) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("run_workflow", str(OK / "parallel_disjoint.yaml"), "--agent", "owner",
                     stdout=out)
    assert refused.value.returncode == 1
    assert out.getvalue().startswith("refused: input_invalid: input `first` is required")
