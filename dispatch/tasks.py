"""Celery tasks: thin wrappers that take ids and call services (docs/design.md#after-commit)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from dispatch.services.approvals import approvals_expire_stale as _approvals_expire_stale
from dispatch.services.ceilings import scopes_sweep as _scopes_sweep
from dispatch.services.delegations import reconcile_delegations as _reconcile_delegations
from dispatch.services.notifications import notification_deliver as _notification_deliver
from dispatch.services.notifications import notifications_due as _notifications_due
from dispatch.services.reconciliation import reconcile_operations as _reconcile_operations
from dispatch.services.run_stops import executions_expire as _executions_expire
from dispatch.services.runs import proposal_run_approved
from dispatch.services.worker import operation_execute
from dispatch.workflows.branches import run_branch as _run_branch
from dispatch.workflows.branches import sweep as _sweep_joins
from dispatch.workflows.resume import resume_stale as _resume_stale
from dispatch.workflows.resume import wake as _wake
from protocols.jsontypes import JSONObject


@shared_task(name="dispatch.tasks.operation_execute", acks_late=True)
def operation_execute_task(operation_id: str) -> None:
    operation_execute(operation_id=operation_id)


@shared_task(name="dispatch.tasks.proposal_run", acks_late=True)
def proposal_run_task(proposal_id: str, principal_id: str) -> None:
    """An approved `dispatch_on_approval` proposal: claim with attempt 1, run, record."""
    proposal_run_approved(proposal_id=proposal_id, principal_id=principal_id)


@shared_task(name="dispatch.tasks.reconcile_operations")
def reconcile_operations() -> JSONObject:
    return _reconcile_operations(now=timezone.now())


@shared_task(name="dispatch.tasks.reconcile_delegations")
def reconcile_delegations() -> int:
    return _reconcile_delegations(now=timezone.now())


@shared_task(name="dispatch.tasks.approvals_expire_stale")
def approvals_expire_stale() -> int:
    return _approvals_expire_stale(now=timezone.now())


@shared_task(name="dispatch.tasks.workflow_wake", acks_late=True)
def workflow_wake(approval_id: str | None = None, wait_id: str | None = None) -> int:
    """Resume the workflow executions parked on a decided approval, or at one parked step
    (docs/workflows.md#waiting-steps); a duplicate wake-up resumes nothing twice."""
    return len(_wake(approval_id=approval_id, wait_id=wait_id, now=timezone.now()))


@shared_task(name="dispatch.tasks.workflow_resume_stale")
def workflow_resume_stale() -> int:
    """The fallback for a lost wake-up: bounded, idempotent."""
    return _resume_stale(now=timezone.now())


@shared_task(name="dispatch.tasks.workflow_branch", acks_late=True)
def workflow_branch(execution_id: str, focus: list[list[str]]) -> str:
    """Run one lane of a concurrent step (docs/workflows.md#concurrent-steps)."""
    return _run_branch(execution_id, focus, now=timezone.now())


@shared_task(name="dispatch.tasks.workflow_join_sweep")
def workflow_join_sweep() -> int:
    """The fallback of a join: delivers it when its lanes ended, enqueues a dead lane again."""
    return _sweep_joins(now=timezone.now())


@shared_task(name="dispatch.tasks.executions_expire")
def executions_expire() -> int:
    """Time out the runs past their deadline (docs/workflows.md#deadlines); the run itself also
    checks at each step boundary."""
    return _executions_expire(now=timezone.now())


@shared_task(name="dispatch.tasks.scopes_sweep")
def scopes_sweep() -> int:
    """Close the scopes of killed holders and of ended runs, giving their unused capacity back
    (docs/design.md#budgets)."""
    return _scopes_sweep(now=timezone.now())


@shared_task(name="dispatch.tasks.notification_deliver", acks_late=True)
def notification_deliver(notification_id: str) -> None:
    _notification_deliver(notification_id=notification_id)


#: The sweep leaves a row this long to the task enqueued for it (on commit, or with a retry's
#: countdown) before it enqueues another, so a busy queue is not filled with duplicates.
SWEEP_GRACE = timedelta(seconds=10)


@shared_task(name="dispatch.tasks.notifications_due")
def notifications_due() -> int:
    return _notifications_due(now=timezone.now() - SWEEP_GRACE)


@shared_task(name="dispatch.tasks.audit_seal")
def audit_seal() -> int:
    from dispatch.services.sealer import seal_all

    return seal_all()
