"""Reads of the votes toward an approval's quorum (docs/design.md#approval-policies), for the
console: who granted and when on one approval's page, and how many grants each row of a queue
page holds, in one query for the whole page.

Only grants count toward a quorum: a denial decides the approval at once, so a pending approval
holds grants only; and only while their voter is active and holds the role
(`dispatch.services.voters`). An approval's requests are already read through
`dispatch.selectors.approvals` (the viewer's tenant and role checked there); these read the votes
of those approvals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from dispatch.models import ApprovalRequest, Principal, Vote
from dispatch.services.authority import has_role
from dispatch.services.voters import counting_voters
from protocols.lifecycle import ApprovalState
from protocols.roles import Role, role_allows

GRANT = "grant"


@dataclass(frozen=True)
class Cast:
    """One grant counted toward a quorum: by whom (their id and name), and when."""

    approver_id: str
    approver_name: str
    at: datetime


def vote_list(*, approval: ApprovalRequest) -> list[Cast]:
    """The grants of `approval` that count, oldest first (one query)."""
    return [Cast(approver_id=approver_id, approver_name=name, at=at)
            for approver_id, name, at in Vote.objects.filter(
                counting_voters(approval.role), approval_id=approval.id,
                outcome=GRANT).order_by("voted_at", "id").values_list(
                "approver_id", "approver__name", "voted_at")]


def voters_left(*, approval: ApprovalRequest, limit: int = 10) -> list[str]:
    """Names of those who could still give `approval` a vote that counts, other than those
    whose grants are in (one query): the tenant's active humans holding its role, admins
    included, by name."""
    voted = Vote.objects.filter(approval_id=approval.id).values("approver_id")
    return list(Principal.objects.filter(
        counting_voters(approval.role, prefix=""), tenant_id=approval.tenant_id,
    ).exclude(id__in=voted).order_by("name").values_list("name", flat=True)[:limit])


def vote_lists(*, approvals: Iterable[ApprovalRequest]) -> dict[str, list[Cast]]:
    """For each approval, the grants of it that count, oldest first (`vote_list`), in one
    query for them all."""
    roles = {approval.id: approval.role for approval in approvals}
    votes: dict[str, list[Cast]] = {approval_id: [] for approval_id in roles}
    if not roles:
        return votes
    for approval_id, approver_id, name, at, kind, role, active in Vote.objects.filter(
            approval_id__in=roles, outcome=GRANT).order_by("voted_at", "id").values_list(
            "approval_id", "approver_id", "approver__name", "voted_at", "approver__kind",
            "approver__role", "approver__user__is_active"):
        # As `counting_voters` reads it, for approvals of several roles at once.
        if kind == Principal.Kind.HUMAN and active and role_allows(role, roles[approval_id]):
            votes[approval_id].append(Cast(approver_id=approver_id, approver_name=name, at=at))
    return votes


def grant_voters(*, approvals: Iterable[ApprovalRequest]) -> dict[str, list[str]]:
    """For each approval needing more than one approver: the ids of those whose grants of it
    count so far, in one query for them all (none when no approval needs more than one)."""
    several = [approval for approval in approvals if approval.quorum > 1]
    if not several:
        return {}
    return {approval_id: [cast.approver_id for cast in casts]
            for approval_id, casts in vote_lists(approvals=several).items()}


def votes_waiting(*, viewer: Principal, limit: int = 25) -> list[Vote]:
    """The viewer's grants on approvals still pending, short of their quorum: newest vote
    first, each with its approval and proposal (one query). Like the queue, an operator sees
    approvals for their own role."""
    queryset = Vote.objects.filter(
        approver_id=viewer.id, outcome=GRANT, approval__tenant_id=viewer.tenant_id,
        approval__state=ApprovalState.PENDING).select_related("approval", "approval__proposal")
    if not has_role(viewer, Role.ADMIN):
        queryset = queryset.filter(approval__role=viewer.role)
    return list(queryset.order_by("-voted_at", "-id")[:limit])
