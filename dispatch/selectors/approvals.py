"""Read-only queries of approvals: the queue (newest first or soonest expiry first, with its
capped count), one approval for its page with the revisions it references, the approval of a
proposal, and the decisions on the tenant's approvals (the Decided tab).

An operator sees only approvals for their own role; an admin sees every role's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from dispatch.models import ApprovalRequest, Decision, Principal, Resource, Revision, Vote
from dispatch.selectors.paging import Count, Page, count_capped, cursor_of, keyset
from dispatch.services.access import access_approval_for_review
from dispatch.services.authority import has_role
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState
from protocols.roles import Role

# --- the approval queue -------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFilter:
    operation: str = ""
    principal_id: str = ""
    created_after: datetime | None = None
    created_before: datetime | None = None


def _reviewable(viewer: Principal) -> QuerySet[ApprovalRequest]:
    """The approvals of the viewer's tenant for a role the viewer holds."""
    queryset = ApprovalRequest.objects.filter(tenant_id=viewer.tenant_id)
    if not has_role(viewer, Role.ADMIN):
        # An admin holds every role; anyone else sees only requests for their own role.
        queryset = queryset.filter(role=viewer.role)
    return queryset


def _pending_approvals(viewer: Principal, filters: QueueFilter) -> QuerySet[ApprovalRequest]:
    """Pending approvals the viewer may decide, through the `approval_queue` index.

    No condition on `expires_at` here: it would lead the planner to the `approval_expiry`
    index and a sort of every pending row. A request past its expiry stays `pending` only until
    the next expiry sweep; pages mark it as expired, and the resolver refuses it anyway.
    """
    queryset = _reviewable(viewer).filter(state=ApprovalState.PENDING)
    if filters.operation:
        queryset = queryset.filter(proposal__operation=filters.operation)
    if filters.principal_id:
        queryset = queryset.filter(proposal__principal_id=filters.principal_id)
    if filters.created_after is not None:
        queryset = queryset.filter(created_at__gte=filters.created_after)
    if filters.created_before is not None:
        queryset = queryset.filter(created_at__lt=filters.created_before)
    return queryset


def approval_list_pending(
    *, viewer: Principal, filters: QueueFilter = QueueFilter(),
    after: Sequence[Any] | None = None, before: Sequence[Any] | None = None, limit: int = 25,
) -> Page[ApprovalRequest]:
    """The queue, newest first, keyset-paged on (created_at, id)."""
    queryset = _pending_approvals(viewer, filters).select_related(
        "proposal", "proposal__principal")
    return keyset(queryset, keys=("created_at", "id"), after=after, before=before,
                  limit=limit)


def approval_list_expiring(
    *, viewer: Principal, filters: QueueFilter = QueueFilter(),
    after: Sequence[Any] | None = None, before: Sequence[Any] | None = None, limit: int = 25,
) -> Page[ApprovalRequest]:
    """The queue by time left, soonest expiry first, keyset-paged on (expires_at, id): `after`
    continues to later expiries, `before` back to sooner ones."""
    queryset = _pending_approvals(viewer, filters).select_related(
        "proposal", "proposal__principal")
    if before is not None:
        at, tie = before
        rows = list(queryset.filter(expires_at__lte=at).filter(
            Q(expires_at__lt=at) | Q(id__lt=tie)).order_by("-expires_at", "-id")[: limit + 1])
        more_sooner = len(rows) > limit
        rows = rows[:limit][::-1]
        return Page(rows=rows, older=cursor_of(rows[-1], ("expires_at", "id")) if rows else None,
                    newer=cursor_of(rows[0], ("expires_at", "id"))
                    if rows and more_sooner else None)
    if after is not None:
        at, tie = after
        queryset = queryset.filter(expires_at__gte=at).filter(
            Q(expires_at__gt=at) | Q(id__gt=tie))
    rows = list(queryset.order_by("expires_at", "id")[: limit + 1])
    more_later = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, older=cursor_of(rows[-1], ("expires_at", "id")) if more_later else None,
                newer=cursor_of(rows[0], ("expires_at", "id"))
                if rows and after is not None else None)


def approval_list_in_state(
    *, viewer: Principal, state: ApprovalState, now: datetime,
) -> QuerySet[ApprovalRequest]:
    """The approvals the viewer may decide whose state is `state` as they read now
    (`effective_approval_state`): a `pending` request past its expiry, not yet swept, is
    `expired`. For the REST API's list, which orders and pages it (docs/rest-api.md#admin)."""
    queryset = _reviewable(viewer)
    if state is ApprovalState.PENDING:
        # Unlike the console's queue (`_pending_approvals`), a condition on `expires_at`: an
        # approver outside the console is offered only what can still be decided. The list is
        # read in `(created_at, id)` order with a LIMIT, which `approval_queue` serves; pending
        # rows are few (each lapses within its contract's window) whichever index is chosen.
        queryset = queryset.filter(state=state, expires_at__gt=now)
    elif state is ApprovalState.EXPIRED:
        queryset = queryset.filter(Q(state=state) | Q(state=ApprovalState.PENDING,
                                                     expires_at__lte=now))
    else:
        queryset = queryset.filter(state=state)
    return queryset.select_related("proposal", "proposal__principal")


def approval_count_pending(*, viewer: Principal, filters: QueueFilter = QueueFilter(),
                           awaiting_viewer: bool = False) -> Count:
    """How many pending approvals the queue holds; with `awaiting_viewer`, only those the viewer
    can still decide: not one they already approved toward its quorum (it waits for others)."""
    queryset = _pending_approvals(viewer, filters)
    if awaiting_viewer:
        queryset = queryset.exclude(Exists(Vote.objects.filter(
            approval_id=OuterRef("id"), approver_id=viewer.id, outcome="grant")))
    return count_capped(queryset)


# --- one approval -------------------------------------------------------------------------------


def approval_get(*, viewer: Principal, approval_id: object) -> ApprovalRequest:
    """One approval of the viewer's tenant and role, with what its page shows.

    Another tenant's id, a forged id and a request for a role the viewer does not hold all
    answer `not_found`, so the page never confirms that such an approval exists.
    """
    approval = access_approval_for_review(viewer, approval_id)
    if not has_role(viewer, approval.role):
        raise Denial(DenialCode.NOT_FOUND, kind="approval", id=approval_id)
    return approval


@dataclass(frozen=True)
class RevisionPair:
    """A referenced revision, the one before it (None for a first revision), and the resource."""

    resource: Resource
    revision: Revision
    previous: Revision | None


def revision_pairs(*, viewer: Principal, resource_refs: list[JSONObject]) -> list[RevisionPair]:
    """For each `{"id","revision"}` a proposal references: that revision and revision - 1."""
    pairs = []
    for ref in resource_refs:
        resource = Resource.objects.filter(id=ref["id"], tenant_id=viewer.tenant_id).first()
        if resource is None:
            continue
        numbers = [ref["revision"], ref["revision"] - 1]
        found = {r.number: r for r in Revision.objects.filter(
            resource_id=resource.id, number__in=numbers)}
        if ref["revision"] not in found:
            continue
        pairs.append(RevisionPair(resource=resource, revision=found[ref["revision"]],
                                  previous=found.get(ref["revision"] - 1)))
    return pairs


def approval_for_proposal(*, viewer: Principal, proposal_id: str) -> ApprovalRequest | None:
    return ApprovalRequest.objects.filter(tenant_id=viewer.tenant_id,
                                          proposal_id=proposal_id).first()


# --- decisions ----------------------------------------------------------------------------------


def decision_list(
    *, viewer: Principal, after: Sequence[Any] | None = None,
    before: Sequence[Any] | None = None, limit: int = 25,
) -> Page[Decision]:
    """Decisions on the tenant's approvals, newest first, by anyone, keyset-paged on
    (decided_at, id); each with its approver, its proposal and the operation it led to. Like the
    queue, an operator sees the decisions of approvals for their own role."""
    queryset = Decision.objects.filter(approval__tenant_id=viewer.tenant_id).select_related(
        "approver", "approval__proposal", "approval__proposal__operation_record")
    if not has_role(viewer, Role.ADMIN):
        queryset = queryset.filter(approval__role=viewer.role)
    return keyset(queryset, keys=("decided_at", "id"), after=after, before=before,
                  limit=limit)
