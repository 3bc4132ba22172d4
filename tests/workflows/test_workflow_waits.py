"""Waiting steps park in the store and a decision or an input wakes them
(docs/workflows.md#waiting-steps): a grant resumes the run once, a denial takes the Denied arm
with its reason, `receive` and `approve` park until their answer arrives, and nothing but the
approval resolver's decision ever takes the Granted arm."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import (
    AuditEvent,
    Execution,
    Operation,
    Permit,
    Proposal,
    TranscriptEntry,
    WorkflowWait,
)
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.services.waits import wait_move
from dispatch.workflows import WorkflowRun, run_workflow
from dispatch.workflows.resume import RESUME_LEASE, deliver_input, resume_stale, wake
from protocols.denials import Denial
from protocols.lifecycle_runs import WaitEvent
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.quorum import second_operator

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
SKETCH = ROOT / "docs" / "examples" / "approval_sketch.yaml"
RUNTIME = Path(__file__).parent / "runtime"
DRAFT = {"from": "support@acme.example", "to": ["ada@example.com"], "subject": "Your refund",
         "body": "We have refunded your order."}


def start(world: World, path: Path, **inputs: Any) -> WorkflowRun:
    """Check the file and start it with its source, as `manage.py run_workflow` does."""
    text = path.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(path))
    assert isinstance(checked, CheckedWorkflow), checked
    return run_workflow(checked, principal=world.owner, inputs=inputs or None,
                        source=(text, str(path)))


def steps(run: WorkflowRun) -> list[tuple[str, str]]:
    return [(o.step, o.status) for o in run.outcomes]


def test_a_grant_resumes_the_parked_run_once(live: World, destinations: Destinations) -> None:
    run = start(live, SKETCH, email_revision=live.draft().id)
    assert (run.state, run.waiting_on) == ("waiting", "steps[1]")
    execution = Execution.objects.get(id=run.execution_id)
    assert execution.state == "waiting"
    parked = WorkflowWait.objects.get(execution=execution)
    proposal = Proposal.objects.get(execution_id=execution.id)
    assert (parked.step, parked.kind, parked.state, parked.approval_id) == (
        "steps[1]", "approval", "parked", proposal.approval.id)
    # The journal records the step the run waits on; the park is audited.
    assert TranscriptEntry.objects.get(execution=execution, kind="tool_call",
                                       call_id="steps[1]").payload == {
        "waits": "approval", "approval_id": proposal.approval.id}
    assert AuditEvent.objects.filter(kind="workflow.parked",
                                     details__execution_id=execution.id).count() == 1
    # Nothing resumes it before the decision: a wake-up finds it pending and parks it again.
    assert wake(approval_id=proposal.approval.id, now=timezone.now())[0].state == "waiting"
    assert resume_stale(now=timezone.now()) == 0

    live.grant(proposal)
    resumed = wake(approval_id=proposal.approval.id, now=timezone.now())
    assert [r.state for r in resumed] == ["finished"]
    assert steps(resumed[0])[-3:] == [("request_approval", "granted"), ("match", "granted"),
                                      ("dispatch", "completed")]
    # Two wake-ups resume once: the second (and the fallback) find nothing parked.
    assert wake(approval_id=proposal.approval.id, now=timezone.now()) == []
    assert resume_stale(now=timezone.now()) == 0
    assert WorkflowWait.objects.get(id=parked.id).state == "resumed"
    assert Execution.objects.get(id=execution.id).state == "finished"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_denial_takes_the_denied_arm_with_the_reason(world: World) -> None:
    run = start(world, SKETCH, email_revision=world.draft().id)
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    approval_decide(approver=world.approver, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason="wrong customer", now=world.now)
    (resumed,) = wake(approval_id=proposal.approval.id, now=timezone.now())
    assert resumed.state == "finished"
    assert steps(resumed)[-2:] == [("request_approval", "rejected"), ("match", "denied")]
    assert resumed.outcomes[-2].detail["reason"] == "wrong customer"
    assert not Operation.objects.filter(proposal=proposal).exists()


def test_the_fallback_resumes_a_run_whose_wake_up_was_lost(world: World) -> None:
    run = start(world, SKETCH, email_revision=world.draft().id)
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    approval_decide(approver=world.approver, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason="no", now=world.now)
    # No wake-up ran (the test's transaction never commits): beat's sweep resumes it, once.
    assert resume_stale(now=timezone.now()) == 1
    assert resume_stale(now=timezone.now()) == 0
    assert Execution.objects.get(id=run.execution_id).state == "finished"


def test_a_partial_vote_wakes_nothing_the_decision_does(
        world: World, settings: Any, fresh_runtime: None,
        django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.APPROVAL_RULES = [{"operation": "email.send", "quorum": 2}]
    woken: list[str | None] = []
    # The hand-over to the worker is recorded here; the worker tests run it for real.
    monkeypatch.setattr("dispatch.services.wakeups.wake_now",
                        lambda approval_id=None, wait_id=None: woken.append(approval_id))
    run = start(world, SKETCH, email_revision=world.draft().id)
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    with django_capture_on_commit_callbacks(execute=True):
        world.grant(proposal)
    assert woken == []  # one vote of two: still pending
    with django_capture_on_commit_callbacks(execute=True):
        world.grant(proposal, second_operator())
    assert woken == [proposal.approval.id]


def test_receive_parks_until_the_input_arrives(live: World,
                                               destinations: Destinations) -> None:
    run = start(live, RUNTIME / "receive_then_send.yaml")
    assert (run.state, run.waiting_on, steps(run)) == ("waiting", "steps[0]",
                                                       [("receive", "waiting")])
    parked = WorkflowWait.objects.get(execution_id=run.execution_id)
    assert (parked.kind, parked.state) == ("receive", "parked")
    # A wake-up without the input parks it again; nothing was created.
    (again,) = wake(wait_id=parked.id, now=timezone.now())
    assert again.state == "waiting"
    deliver_input(principal=live.owner, execution_id=run.execution_id, value=DRAFT,
                  now=timezone.now())
    with pytest.raises(Denial) as twice:
        deliver_input(principal=live.owner, execution_id=run.execution_id, value=DRAFT,
                      now=timezone.now())
    assert twice.value.code == "protocol_state_invalid"
    (resumed,) = wake(wait_id=parked.id, now=timezone.now())
    assert (resumed.state, resumed.waiting_on) == ("waiting", "steps[3]")
    assert steps(resumed)[:3] == [("receive", "received"), ("create", "created"),
                                  ("propose", "proposed")]
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    live.grant(proposal)
    (done,) = wake(approval_id=proposal.approval.id, now=timezone.now())
    assert (done.state, steps(done)[-1]) == ("finished", ("dispatch", "completed"))


def test_only_the_resolver_takes_the_granted_arm(world: World) -> None:
    run = start(world, SKETCH, email_revision=world.draft().id)
    parked = WorkflowWait.objects.get(execution_id=run.execution_id)
    forged = {"tag": "Granted", "permit": "prm_forged"}
    for who in (world.owner, world.approver, world.admin):
        with pytest.raises(Denial) as refused:
            deliver_input(principal=who, execution_id=run.execution_id, value=forged,
                          now=timezone.now())
        assert refused.value.code == "protocol_state_invalid"
    # However often it is woken, from wherever, an undecided approval keeps it waiting.
    for _ in range(2):
        assert [r.state for r in wake(wait_id=parked.id, now=timezone.now())] == ["waiting"]
    assert resume_stale(now=timezone.now()) == 0
    assert WorkflowWait.objects.get(id=parked.id).value is None
    assert not Permit.objects.filter(proposal__execution_id=run.execution_id).exists()


def test_approve_is_a_humans_bool_never_the_agents(world: World) -> None:
    run = start(world, RUNTIME / "approve_gate.yaml", draft=world.draft().id)
    assert (run.state, steps(run)) == ("waiting", [("approve", "waiting")])
    for who, value, code in ((world.owner, True, "role_required"),
                             (world.approver, "yes", "schema_invalid"),
                             (world.outsider_operator, True, "not_found")):
        with pytest.raises(Denial) as refused:
            deliver_input(principal=who, execution_id=run.execution_id, value=value,
                          now=timezone.now())
        assert refused.value.code == code
    wait = deliver_input(principal=world.approver, execution_id=run.execution_id, value=True,
                         now=timezone.now())
    (resumed,) = wake(wait_id=wait.id, now=timezone.now())
    # The Bool only steered control flow: the send still waits for its own approval.
    assert (resumed.state, resumed.waiting_on) == ("waiting", "steps[1].then[1]")
    assert steps(resumed) == [("approve", "yes"), ("if", "then"), ("propose", "proposed"),
                              ("request_approval", "pending")]


def test_an_execution_started_without_its_source_is_left_to_its_caller(
        live: World, destinations: Destinations) -> None:
    world = live
    text = SKETCH.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(SKETCH))
    assert isinstance(checked, CheckedWorkflow)
    run = run_workflow(checked, principal=world.owner,
                       inputs={"email_revision": world.draft().id})
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    world.grant(proposal)
    assert wake(approval_id=proposal.approval.id, now=timezone.now()) == []
    assert WorkflowWait.objects.get(execution_id=run.execution_id).state == "refused"
    # Its caller resumes it as before.
    again = run_workflow(checked, principal=world.owner, execution_id=run.execution_id)
    assert again.state == "finished"


def test_the_docs_show_the_sketch_file_that_the_tests_run() -> None:
    doc = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    marker = "<!-- example: docs/examples/approval_sketch.yaml -->\n```yaml\n"
    start_at = doc.index(marker) + len(marker)
    shown = doc[start_at:doc.index("```\n", start_at)]
    assert shown == SKETCH.read_text(encoding="utf-8")


def test_the_fallback_takes_over_from_a_resumer_that_died(world: World) -> None:
    run = start(world, SKETCH, email_revision=world.draft().id)
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    approval_decide(approver=world.approver, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason="no", now=world.now)
    parked = WorkflowWait.objects.get(execution_id=run.execution_id)
    long_ago = timezone.now() - RESUME_LEASE - timedelta(seconds=1)
    # A wake-up claimed it, then its process died before the run resumed.
    assert wait_move(parked, WaitEvent.CLAIM, now=long_ago, actor="system")
    assert wake(approval_id=proposal.approval.id, now=timezone.now()) == []
    assert resume_stale(now=long_ago + RESUME_LEASE) == 0  # its lease has not run out yet
    assert resume_stale(now=timezone.now()) == 1
    assert Execution.objects.get(id=run.execution_id).state == "finished"
    assert WorkflowWait.objects.get(id=parked.id).state == "resumed"
