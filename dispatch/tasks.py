"""Celery tasks: thin wrappers that take ids and call services (docs/design.md#after-commit)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from dispatch.services.approvals import approvals_expire_stale as _approvals_expire_stale
from dispatch.services.delegations import reconcile_delegations as _reconcile_delegations
from dispatch.services.reconciliation import reconcile_operations as _reconcile_operations
from dispatch.services.worker import operation_execute
from protocols.jsontypes import JSONObject


@shared_task(name="dispatch.tasks.operation_execute", acks_late=True)
def operation_execute_task(operation_id: str) -> None:
    operation_execute(operation_id=operation_id)


@shared_task(name="dispatch.tasks.reconcile_operations")
def reconcile_operations() -> JSONObject:
    return _reconcile_operations(now=timezone.now())


@shared_task(name="dispatch.tasks.reconcile_delegations")
def reconcile_delegations() -> int:
    return _reconcile_delegations(now=timezone.now())


@shared_task(name="dispatch.tasks.approvals_expire_stale")
def approvals_expire_stale() -> int:
    return _approvals_expire_stale(now=timezone.now())
