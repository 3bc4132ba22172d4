"""Read-only queries of operations: the tenant's list, the ones whose outcome is unknown (with
their capped count), one operation for its page with its attempts and its timeline, and the
operation a proposal led to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from django.db.models import Prefetch, Q, QuerySet, prefetch_related_objects

from dispatch.models import Attempt, AuditEvent, Operation, Principal
from dispatch.selectors.paging import Count, Page, count_capped, keyset
from dispatch.services.access import access_operation_for_page
from protocols.lifecycle import OperationState


def _attempts_in_order() -> Prefetch[Literal["attempts"], QuerySet[Attempt]]:
    return Prefetch("attempts", queryset=Attempt.objects.order_by("number"))


def _with_attempts(queryset: QuerySet[Operation]) -> QuerySet[Operation]:
    return queryset.select_related("proposal", "principal").prefetch_related(
        _attempts_in_order())


def operation_list_unknown(
    *, viewer: Principal, after: Sequence[Any] | None = None,
    before: Sequence[Any] | None = None, limit: int = 20,
) -> Page[Operation]:
    """Operations whose outcome is unknown, most recently changed first (index
    `operation_tenant_state`)."""
    queryset = _with_attempts(Operation.objects.filter(
        tenant_id=viewer.tenant_id, state=OperationState.UNKNOWN))
    return keyset(queryset, keys=("updated_at", "id"), after=after, before=before,
                  limit=limit)


def operation_count_unknown(*, viewer: Principal) -> Count:
    return count_capped(Operation.objects.filter(
        tenant_id=viewer.tenant_id, state=OperationState.UNKNOWN))


def operation_get(*, viewer: Principal, operation_id: object) -> Operation:
    operation = access_operation_for_page(viewer, operation_id)
    prefetch_related_objects([operation], _attempts_in_order())
    return operation


def operation_timeline(*, viewer: Principal, operation: Operation) -> list[AuditEvent]:
    """Every audit event of the operation and of its proposal, oldest first."""
    return list(AuditEvent.objects.filter(
        Q(operation_id=operation.id) | Q(proposal_id=operation.proposal_id),
        tenant_id=viewer.tenant_id,
    ).order_by("at", "id")[:500])


def operation_for_proposal(*, viewer: Principal, proposal_id: str) -> Operation | None:
    return Operation.objects.filter(tenant_id=viewer.tenant_id, proposal_id=proposal_id).first()


def operation_list(
    *, viewer: Principal, state: str = "", after: Sequence[Any] | None = None,
    before: Sequence[Any] | None = None, limit: int = 25,
) -> Page[Operation]:
    """The tenant's operations, newest claim first, narrowed to one state if asked,
    keyset-paged on (claimed_at, id)."""
    queryset = Operation.objects.filter(tenant_id=viewer.tenant_id).select_related(
        "principal", "proposal__approval")
    if state:
        queryset = queryset.filter(state=state)
    return keyset(queryset, keys=("claimed_at", "id"), after=after, before=before,
                  limit=limit)
