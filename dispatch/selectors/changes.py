"""Reads for the console's "changed" and "stale" flags (docs/design.md#changes): for proposals
already read, where their resources stand now and which earlier proposal each revises.

A whole queue page costs at most three queries, whatever its length: one over the pages'
`ProposalResource` rows (each with its resource's current revision, the earlier proposal it
revises and a pending proposal of the current revision, as correlated subqueries on the
`proposal_by_revision` index), one for the earlier proposals' snapshots and one for the
payloads of the revisions that moved on. A page without resources costs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import F, OuterRef, Q, Subquery

from dispatch.models import Principal, Proposal, ProposalResource, Revision
from protocols.jsontypes import JSONValue
from protocols.lifecycle import ApprovalState


@dataclass(frozen=True)
class Moved:
    """A resource edited after the proposal: it is bound to revision `bound`, and `current` is
    the resource's revision now. `newer_approval_id`: a pending approval of a proposal of the
    current revision, if one waits."""

    resource_id: str
    kind: str
    bound: int
    current: int
    bound_payload: JSONValue
    current_payload: JSONValue
    newer_approval_id: str | None


@dataclass(frozen=True)
class Earlier:
    """The latest proposal of an older revision of one of this proposal's resources: what this
    one revises."""

    proposal_id: str
    approval_id: str | None
    resource_id: str
    revision: int
    canonical: str


@dataclass(frozen=True)
class Lineage:
    moved: tuple[Moved, ...] = ()
    earlier: Earlier | None = None

    @property
    def stale(self) -> bool:
        return bool(self.moved)


def proposal_lineage(
    *, viewer: Principal, proposals: Sequence[Proposal],
) -> dict[str, Lineage]:
    """Each proposal's `Lineage`, by proposal id (proposals of other tenants are left out)."""
    wanted = [p.id for p in proposals if p.resource_refs and p.tenant_id == viewer.tenant_id]
    if not wanted:
        return {}
    resource = OuterRef("resource_id")
    earlier = ProposalResource.objects.filter(
        resource_id=resource, revision__lt=OuterRef("revision"),
    ).order_by("-revision", "-proposal__created_at", "-proposal_id")
    newer = ProposalResource.objects.filter(
        resource_id=resource, revision=OuterRef("resource__current_revision"),
        proposal__approval__state=ApprovalState.PENDING,
    ).order_by("-proposal__created_at", "-proposal_id").values("proposal__approval__id")[:1]
    rows = list(ProposalResource.objects.filter(proposal_id__in=wanted).annotate(
        kind=F("resource__kind"), current=F("resource__current_revision"),
        earlier_id=Subquery(earlier.values("proposal_id")[:1]),
        earlier_revision=Subquery(earlier.values("revision")[:1]),
        newer_approval=Subquery(newer),
    ).values("proposal_id", "resource_id", "revision", "kind", "current", "earlier_id",
             "earlier_revision", "newer_approval").order_by("proposal_id", "id"))
    earlier_ids = {row["earlier_id"] for row in rows if row["earlier_id"]}
    snapshots = {p["id"]: p for p in Proposal.objects.filter(id__in=earlier_ids).values(
        "id", "canonical", "approval__id")} if earlier_ids else {}
    moved_rows = [row for row in rows if row["current"] != row["revision"]]
    payloads: dict[tuple[str, int], JSONValue] = {}
    if moved_rows:
        which = Q(pk__in=[])
        for row in moved_rows:
            which |= Q(resource_id=row["resource_id"], number__in=[row["revision"],
                                                                   row["current"]])
        payloads = {(r.resource_id, r.number): r.payload
                    for r in Revision.objects.filter(which).only("resource_id", "number",
                                                                 "payload")}
    lineages: dict[str, Lineage] = {}
    for proposal_id in wanted:
        mine = [row for row in rows if row["proposal_id"] == proposal_id]
        moved = tuple(Moved(
            resource_id=row["resource_id"], kind=row["kind"], bound=row["revision"],
            current=row["current"],
            bound_payload=payloads.get((row["resource_id"], row["revision"])),
            current_payload=payloads.get((row["resource_id"], row["current"])),
            newer_approval_id=row["newer_approval"]) for row in mine
            if row["current"] != row["revision"])
        # The most recent revision revised, if several resources were: the one edited last.
        revising = sorted((row for row in mine if row["earlier_id"] in snapshots),
                          key=lambda row: row["revision"], reverse=True)
        found = None
        if revising:
            row = revising[0]
            snapshot = snapshots[row["earlier_id"]]
            found = Earlier(proposal_id=row["earlier_id"], approval_id=snapshot["approval__id"],
                            resource_id=row["resource_id"], revision=row["earlier_revision"],
                            canonical=snapshot["canonical"])
        if moved or found:
            lineages[proposal_id] = Lineage(moved=moved, earlier=found)
    return lineages

