"""Reads of the votes toward an approval's quorum (docs/design.md#approval-policies), for the
console: who granted and when on one approval's page, and how many grants each row of a queue
page holds, in one query for the whole page.

Only grants count toward a quorum: a denial decides the approval at once, so a pending approval
holds grants only. An approval's requests are already read through `dispatch.selectors` (the
viewer's tenant and role checked there); these read the votes of those approvals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from dispatch.models import ApprovalRequest, Principal, Vote
from dispatch.services.authority import has_role
from protocols.lifecycle import ApprovalState
from protocols.roles import Role

GRANT = "grant"


@dataclass(frozen=True)
class Cast:
    """One grant counted toward a quorum: by whom (their id and name), and when."""

    approver_id: str
    approver_name: str
    at: datetime


def vote_list(*, approval: ApprovalRequest) -> list[Cast]:
    """The grants of `approval`, oldest first (one query)."""
    return [Cast(approver_id=approver_id, approver_name=name, at=at)
            for approver_id, name, at in Vote.objects.filter(
                approval_id=approval.id, outcome=GRANT).order_by("voted_at", "id").values_list(
                "approver_id", "approver__name", "voted_at")]


def grant_voters(*, approvals: Iterable[ApprovalRequest]) -> dict[str, list[str]]:
    """For each approval needing more than one approver: the ids of those who granted it so
    far, in one query for them all (none when no approval needs more than one)."""
    ids = [approval.id for approval in approvals if approval.quorum > 1]
    if not ids:
        return {}
    voters: dict[str, list[str]] = {approval_id: [] for approval_id in ids}
    for approval_id, approver_id in Vote.objects.filter(
            approval_id__in=ids, outcome=GRANT).values_list("approval_id", "approver_id"):
        voters[approval_id].append(approver_id)
    return voters


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
