"""Read-only queries of the audit: the tenant's events, filtered and keyset-paged, the kinds the
runtime writes, and what the console's audit page reads beside them.

A page of audit events names proposals and operations by id. What a person reads of each row
(the operation's name, its summary sentence, the approval and the operation it links to) comes
from the proposals the page names, fetched in one query for the whole page: a page costs the
same number of queries whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from dispatch.models import AuditEvent, Principal, Proposal
from dispatch.selectors.paging import Page


def audit_proposals(*, viewer: Principal, events: Iterable[AuditEvent]) -> dict[str, Proposal]:
    """The proposals the events name, by id, each with its approval request and its operation
    (None where it has none), in one query; only the viewer's tenant's."""
    ids = sorted({event.proposal_id for event in events if event.proposal_id})
    if not ids:
        return {}
    proposals = Proposal.objects.filter(tenant_id=viewer.tenant_id, id__in=ids).select_related(
        "approval", "operation_record")
    return {proposal.id: proposal for proposal in proposals}


@dataclass(frozen=True)
class AuditFilter:
    kind: str = ""
    operation_id: str = ""
    proposal_id: str = ""


def audit_events(*, viewer: Principal, filters: AuditFilter) -> QuerySet[AuditEvent]:
    """The audit of the viewer's tenant only, narrowed by the filter; callers check roles."""
    queryset = AuditEvent.objects.filter(tenant_id=viewer.tenant_id)
    if filters.kind:
        queryset = queryset.filter(kind=filters.kind)
    if filters.operation_id:
        queryset = queryset.filter(operation_id=filters.operation_id)
    if filters.proposal_id:
        queryset = queryset.filter(proposal_id=filters.proposal_id)
    return queryset


def audit_of_tenant(
    principal: Principal, *, operation: str | None, proposal: str | None, kind: str | None,
) -> QuerySet[AuditEvent]:
    """The audit of the caller's tenant only; callers check the admin role first."""
    return audit_events(viewer=principal, filters=AuditFilter(
        kind=kind or "", operation_id=operation or "", proposal_id=proposal or ""))


def audit_list(
    *, viewer: Principal, filters: AuditFilter = AuditFilter(),
    after: int | None = None, before: int | None = None, limit: int = 50,
) -> Page[AuditEvent]:
    """Audit events newest first, keyset-paged on the append-only id (index `audit_tenant`,
    `audit_kind`, `audit_operation` or `audit_proposal`, whichever the filter selects)."""
    queryset = audit_events(viewer=viewer, filters=filters)
    if before is not None:
        rows = list(queryset.filter(id__gt=before).order_by("id")[: limit + 1])
        more = len(rows) > limit
        rows = rows[:limit][::-1]
        return Page(rows=rows, older=(rows[-1].id,) if rows else None,
                    newer=(rows[0].id,) if rows and more else None)
    if after is not None:
        queryset = queryset.filter(id__lt=after)
    rows = list(queryset.order_by("-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, older=(rows[-1].id,) if more else None,
                newer=(rows[0].id,) if rows and after is not None else None)


def audit_kinds(*, viewer: Principal) -> list[str]:
    """The audit kinds the runtime writes, for the filter's choices (a fixed list, no scan;
    tests/unit/test_audit_kinds.py checks that every kind a service writes is in it)."""
    return sorted(AUDIT_KINDS)


#: Every kind of audit event the runtime appends.
AUDIT_KINDS = frozenset({
    "proposal.created", "proposal.cancelled", "approval.requested", "approval.voted",
    "approval.granted",
    "approval.denied", "approval.expired", "permit.claimed", "permit.revoked",
    "attempt.started", "attempt.ignored", "operation.completed", "operation.failed_no_effect",
    "operation.unknown", "operation.retried", "operation.reconciled", "operation.evidence",
    "renewal.requested", "renewal.voted", "renewal.granted", "renewal.denied", "renewal.expired",
    "renewal.withdrawn",
    "grant.issued", "grant.revoked", "grant.delegated", "intake.denied", "dispatch.denied",
    "resource.created", "resource.revised", "receipt.issued", "attestation.issued",
    "question.answered", "resource.released",
    "workflow.parked", "workflow.resumed", "workflow.input",
    "execution.timed_out", "execution.cancelled",
    "pause.set", "pause.lifted", "agent.created", "agent.token_rotated",
})
