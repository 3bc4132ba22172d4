"""Lanes at the run's concurrency ceiling wait for a slot instead of being refused
(docs/workflows.md#ceilings): the refused claim parks the lane's dispatch step as a `slot` wait
(`waiting_for_slot`), and the settling of one of the run's actions wakes the lane that waited
longest, which then runs alone (its focus kept with the wait), never the whole run again.

The test is the worker here (as in test_concurrent_steps.py); the cross-process run with real
workers is in tests/workers/test_workflow_lanes.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from dispatch.models import AuditEvent, Operation, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.services.ceilings import Ceiling, execution_slot_free
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.services.worker import operation_execute
from dispatch.workflows import WorkflowRun, run_workflow
from dispatch.workflows.branches import run_branch
from dispatch.workflows.resume import resume_stale, wake
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World

pytestmark = pytest.mark.django_db

LOOP = Path(__file__).parent / "ok" / "parallel_loop_fresh.yaml"


def start(world: World, concurrency: int, customers: list[str]) -> WorkflowRun:
    text = LOOP.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(LOOP))
    assert isinstance(checked, CheckedWorkflow), checked
    return run_workflow(checked, principal=world.owner, inputs={"customers": customers},
                        source=(text, str(LOOP)),
                        ceiling=Ceiling(calls=50, attempts=50, concurrency=concurrency))


def blocker(world: World, execution_id: str) -> Operation:
    """An action of the run, claimed and not settled: it holds one of the run's slots."""
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-009"}, execution_id=execution_id,
                               now=timezone.now())
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=timezone.now(),
                             enqueue=False)


def test_a_lane_at_the_ceiling_waits_for_a_slot_and_a_settling_action_wakes_it(
        world: World, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    woken: list[str | None] = []
    monkeypatch.setattr("dispatch.services.wakeups.wake_now",
                        lambda *, approval_id=None, wait_id=None: woken.append(wait_id))
    run = start(world, concurrency=1, customers=["cus-001", "cus-002"])
    held = blocker(world, run.execution_id)
    assert not execution_slot_free(run.execution_id)

    # Lane 1 reaches its dispatch at the ceiling: it waits, it is not refused.
    assert run_branch(run.execution_id, [["steps[0]", "1"]], now=timezone.now()) == "waiting"
    wait = WorkflowWait.objects.get(execution_id=run.execution_id, kind="slot")
    assert (wait.state, wait.step, wait.value) == (
        "parked", "steps[0].do[1]@1", {"focus": [["steps[0]", "1"]]})
    assert AuditEvent.objects.filter(kind="workflow.parked", details__waits="slot").count() == 1
    assert not Operation.objects.filter(proposal__arguments__customer_id="cus-001").exists()
    assert woken == []  # nothing settled: no wake-up, and no poll finds a free slot
    assert resume_stale(now=timezone.now()) == 0

    # The blocker settles: after its commit, the waiting lane is woken (one wake-up).
    with django_capture_on_commit_callbacks(execute=True):
        operation_execute(operation_id=held.id)
    assert woken == [wait.id]
    wake(wait_id=wait.id, now=timezone.now())  # the wake-up's task: the lane alone
    wait.refresh_from_db()
    assert wait.state == "resumed"
    done = Operation.objects.get(proposal__arguments__customer_id="cus-001")
    assert done.state == "completed"
    # The other lane never ran: the wake-up ran lane 1 only, not the whole run again.
    assert not Operation.objects.filter(proposal__arguments__customer_id="cus-002").exists()


def test_a_lane_that_parks_after_the_slot_freed_wakes_itself(
        world: World, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    """The lost wake-up: the action settles (and commits) between the lane's refused claim and
    its park, so its wake-up finds nothing parked; the park sees the free slot and wakes the
    lane itself."""
    woken: list[str | None] = []
    monkeypatch.setattr("dispatch.services.wakeups.wake_now",
                        lambda *, approval_id=None, wait_id=None: woken.append(wait_id))
    run = start(world, concurrency=1, customers=["cus-001"])
    held = blocker(world, run.execution_id)
    from dispatch.workflows import waits

    def settle_first(name: str) -> None:
        if name == "workflow.before_park":  # the slot frees, committed, before the park
            with django_capture_on_commit_callbacks(execute=True):
                operation_execute(operation_id=held.id)

    rechecked: list[str] = []
    monkeypatch.setattr(waits, "failpoint", settle_first)
    monkeypatch.setattr(waits, "wake_on_input", rechecked.append)
    assert run_branch(run.execution_id, [["steps[0]", "1"]], now=timezone.now()) == "waiting"
    wait = WorkflowWait.objects.get(execution_id=run.execution_id, kind="slot")
    assert woken == []  # the settling's wake-up came before the park: it found nothing
    assert rechecked == [wait.id]  # the park found the slot free and woke the lane
