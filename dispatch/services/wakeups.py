"""Decisions wake executions (docs/workflows.md#waiting-steps): after the commit of a decision
or an input, the resumption of every workflow execution parked on it is handed to a worker.

By task name, ids only (as `dispatch.queue`): services never import the workflow runtime that
the task runs. The resumption claims each parked step with a conditional UPDATE, so a duplicate
wake-up resumes nothing twice; beat's `workflow_resume_stale` is the fallback for a lost one.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction
from django.db.models import Q

from dispatch.models import Execution, WorkflowWait
from dispatch.store import executions as store

WAKE = "dispatch.tasks.workflow_wake"
#: `Execution.adapter` of a workflow run starts with it (the workflow's name follows).
WORKFLOW_ADAPTER = "workflow:"


def wake_on_decision(approval_id: str, *, execution_id: str) -> None:
    """Once the current transaction commits (at once outside one), resume every execution
    parked on the approval `approval_id`: only call it where a decision was made. Only a
    workflow parks, so a proposal of any other execution (`execution_id`, the proposal's) enqueues
    no task; a workflow's execution exists before its proposals, so none is missed."""
    if execution_id and store.adapter_starts_with(id=execution_id, prefix=WORKFLOW_ADAPTER):
        transaction.on_commit(lambda: wake_now(approval_id=approval_id))


def wake_on_input(wait_id: str) -> None:
    """Once the current transaction commits, resume the execution parked at `wait_id`."""
    transaction.on_commit(lambda: wake_now(wait_id=wait_id))


def wake_on_slot(execution_id: str | None) -> None:
    """Once the current transaction commits, wake the lane of `execution_id`'s run that has
    waited longest for a slot (docs/workflows.md#ceilings): an action of the run settled, so
    one slot of its concurrency is free. One lane per freed slot; a woken lane that finds the
    slot taken again waits again, and checks again after its park (`slot_recheck`)."""
    if execution_id:
        transaction.on_commit(lambda: _wake_one_slot(execution_id))


def _wake_one_slot(execution_id: str) -> None:
    tree = Execution.objects.filter(id=execution_id).values("root_id")
    oldest = (WorkflowWait.objects.filter(kind=WorkflowWait.Kind.SLOT,
                                          state=WorkflowWait.State.PARKED)
              .filter(Q(execution_id=execution_id) | Q(execution_id__in=tree))
              .order_by("parked_at", "id").values_list("id", flat=True).first())
    if oldest is not None:
        wake_now(wait_id=oldest)


def wake_now(*, approval_id: str | None = None, wait_id: str | None = None) -> None:
    current_app.tasks[WAKE].delay(approval_id=approval_id, wait_id=wait_id)
