"""Deadlines and cancellation of runs (docs/workflows.md#deadlines): a deadline passing while an
approval is pending withdraws it and ends the run `timed_out`; one passing mid-attempt cancels the
attempt through its handler's context (in another OS process) and the outcome is honest; `cancel`
does the same and ends the run `cancelled`; both audited; a consumed permit is never freed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    Execution,
    Operation,
    Permit,
    Proposal,
    Scope,
)
from dispatch.runtime import get_runtime
from dispatch.services.ceilings import Ceiling, scope_open
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.run_stops import _end, execution_cancel, executions_expire
from dispatch.workflows import WorkflowRun, run_workflow
from dispatch.workflows.resume import resume_stale, wake
from protocols.denials import Denial, DenialCode
from protocols.lifecycle_runs import ExecutionEvent
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.processes import ROOT, child_env

SKETCH = Path(ROOT) / "docs" / "examples" / "approval_sketch.yaml"


def start(world: World, *, deadline_s: float | None, ceiling: Ceiling | None = None,
          **inputs: Any) -> WorkflowRun:
    """Start the spec's sketch (docs/examples/approval_sketch.yaml) with its source, as the
    command does, so that a decision resumes it."""
    text = SKETCH.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(SKETCH))
    assert isinstance(checked, CheckedWorkflow), checked
    return run_workflow(checked, principal=world.owner, inputs=inputs,
                        source=(text, str(SKETCH)), deadline_s=deadline_s, ceiling=ceiling)


def _cancel_api(world: World, execution_id: str, token: str | None = None) -> Any:
    return Client().post(f"/api/v1/executions/{execution_id}/cancel/",
                         data=json.dumps({"reason": "not needed any more"}),
                         content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {token or world.owner_token}")


@pytest.mark.django_db
@pytest.mark.parametrize("end", ["deadline", "cancel"])
def test_a_run_ending_while_its_approval_is_pending_withdraws_it(
        live: World, destinations: Destinations, end: str) -> None:
    run = start(live, deadline_s=60 if end == "deadline" else None,
                email_revision=live.draft().id)
    assert (run.state, run.waiting_on) == ("waiting", "steps[1]")
    execution = Execution.objects.get(id=run.execution_id)
    root = scope_open(execution=execution, name="run", ceiling=Ceiling(5, 5, 1),
                      now=timezone.now())
    proposal = Proposal.objects.get(execution_id=execution.id)
    if end == "deadline":
        assert execution.deadline_at is not None
        assert executions_expire(now=timezone.now()) == 0  # not due yet
        assert executions_expire(now=execution.deadline_at + timedelta(seconds=1)) == 1
        expected, kind = "timed_out", "execution.timed_out"
    else:
        response = _cancel_api(live, execution.id)
        assert response.status_code == 200, response.content
        assert response.json() == {"execution_id": execution.id, "state": "cancelled"}
        expected, kind = "cancelled", "execution.cancelled"
    execution.refresh_from_db()
    assert execution.state == expected
    approval = ApprovalRequest.objects.get(id=proposal.approval.id)
    assert approval.state == "revoked"  # withdrawn: no operator can grant it any more
    assert Proposal.objects.get(id=proposal.id).cancelled_at is not None
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert AuditEvent.objects.filter(kind=kind, details__execution_id=execution.id).count() == 1
    assert AuditEvent.objects.filter(kind="proposal.cancelled", proposal_id=proposal.id).count() \
        == 1
    assert Scope.objects.get(id=root.id).closed_at is not None  # its capacity went back
    with pytest.raises(Denial) as late:
        live.grant(proposal)
    assert late.value.code is DenialCode.APPROVAL_REVOKED  # withdrawn: nobody can decide it
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    # A wake-up, the fallback or the caller running it again takes no further step.
    wake(approval_id=approval.id, now=timezone.now())
    resume_stale(now=timezone.now())
    again = start_again(live, execution.id)
    assert again.state == expected
    assert [o.step for o in again.outcomes] == []
    assert list_all(destinations.directory)["email"] == []
    # The ended run proposes nothing more, whoever names it.
    with pytest.raises(Denial) as closed:
        live.propose_email(live.draft(), execution_id=execution.id)
    assert (closed.value.code, closed.value.details) == (
        DenialCode.PROTOCOL_STATE_INVALID, {"execution_id": execution.id})
    # Ending an ended run again is refused, over the API as in the service.
    repeat = _cancel_api(live, execution.id)
    assert repeat.status_code == 409
    assert repeat.json()["error"]["details"] == {"state": expected}


def start_again(world: World, execution_id: str) -> WorkflowRun:
    text = SKETCH.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(SKETCH))
    assert isinstance(checked, CheckedWorkflow)
    return run_workflow(checked, principal=world.owner, execution_id=execution_id)


@pytest.mark.django_db
def test_only_the_runs_principal_or_an_operator_cancels_it(
        live: World, destinations: Destinations) -> None:
    run = start(live, deadline_s=None, email_revision=live.draft().id)
    from tests.conftest import make_world

    other = make_world(timezone.now(), prefix="other-")
    assert _cancel_api(live, run.execution_id, token=other.owner_token).status_code == 404
    execution_cancel(actor=live.approver, execution_id=run.execution_id, now=timezone.now(),
                     reason="operator stop")
    assert Execution.objects.get(id=run.execution_id).state == "cancelled"


def _wait_for(check: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("end", ["deadline", "cancel"])
def test_a_run_ending_mid_attempt_cancels_the_attempt_and_the_outcome_is_honest(
        live: World, destinations: Destinations, end: str) -> None:
    """The granted run resumes in another process and dispatches to a destination that records
    the message and then hangs. The deadline passes (or the run is cancelled) mid-attempt: the
    handler's context is cancelled, the call in flight is abandoned, the outcome is `unknown`
    (the message was received), the permit stays consumed and the run ends."""
    run = start(live, deadline_s=60, email_revision=live.draft(to=["ada@hang.test"]).id)
    execution = Execution.objects.get(id=run.execution_id)
    proposal = Proposal.objects.get(execution_id=execution.id)
    permit = live.grant(proposal)
    child = subprocess.Popen([sys.executable, "-m", "tests.support.child", "wake",
                              proposal.approval.id], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        # The attempt is open and the destination holds the message: the effect happened and
        # its answer hangs.
        _wait_for(lambda: Attempt.objects.filter(operation__proposal_id=proposal.id,
                                                 ended_at__isnull=True).exists(),
                  "attempt 1 started")
        _wait_for(lambda: len(list_all(destinations.directory)["email"]) == 1,
                  "the sink recorded the message")
        started = time.monotonic()
        if end == "deadline":
            assert executions_expire(now=timezone.now() + timedelta(seconds=61)) == 1
            expected = "timed_out"
        else:
            execution_cancel(actor=live.owner, execution_id=execution.id, now=timezone.now())
            expected = "cancelled"
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"resumed": [expected]}
    assert time.monotonic() - started < 10  # the destination hangs for 30 s
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "unknown"  # never failed_no_effect: the message was received
    attempt = Attempt.objects.get(operation_id=operation.id)
    assert attempt.outcome == "uncertain"
    assert "cancelled while the call was in flight" in attempt.error
    assert Permit.objects.get(id=permit.id).state == "claimed"  # never freed
    assert Execution.objects.get(id=execution.id).state == expected
    assert len(list_all(destinations.directory)["email"]) == 1


@pytest.mark.django_db
def test_the_command_declares_the_deadline(live: World, destinations: Destinations) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = StringIO()
    before = timezone.now()
    call_command("run_workflow", str(SKETCH), "--agent", live.owner.name, "--input",
                 f"email_revision={live.draft().id}", "--deadline-s", "30", "--json",
                 stdout=out)
    run = json.loads(out.getvalue())
    execution = Execution.objects.get(id=run["execution_id"])
    assert execution.deadline_at is not None
    assert timedelta(seconds=29) < execution.deadline_at - before < timedelta(seconds=31)
    with pytest.raises(CommandError, match="deadline_s"):
        call_command("run_workflow", str(SKETCH), "--agent", live.owner.name, "--input",
                     f"email_revision={live.draft().id}", "--deadline-s", "0", stdout=out)


@pytest.mark.django_db
@pytest.mark.parametrize("event", [ExecutionEvent.CANCEL, ExecutionEvent.TIME_OUT])
def test_an_approved_action_of_a_stopped_run_is_not_claimed(
        live: World, destinations: Destinations, event: ExecutionEvent) -> None:
    """A process that ended the run and died before withdrawing its actions leaves an issued
    permit behind (as a claim racing the stop would find it): the claim reads the run's state
    and refuses, so nothing runs, whether the agent dispatches or a worker (or reconciliation's
    requeue) claims."""
    run = start(live, deadline_s=None, email_revision=live.draft().id)
    execution = Execution.objects.get(id=run.execution_id)
    proposal = Proposal.objects.get(execution_id=execution.id)
    assert live.grant(proposal) is not None  # issued; the wake-up waits for a commit
    assert _end(execution, event, actor="test", now=timezone.now(), reason="the process died")
    with pytest.raises(Denial) as refused:
        proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=timezone.now())
    assert refused.value.code is DenialCode.PROTOCOL_STATE_INVALID
    assert refused.value.details["execution_id"] == execution.id
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert Permit.objects.get(proposal_id=proposal.id).state == "issued"
    assert list_all(destinations.directory)["email"] == []  # nothing was sent
