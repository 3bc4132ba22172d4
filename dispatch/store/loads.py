"""The hot path's loads of a request's records with what its checks read of them
(docs/design.md#choke-points, #statement-layer): one fixed query each, its row turned into model
instances without the query compiler, the related ones cached as select_related caches them.

Each load is scoped to a tenant; None when nothing matches (missing and another tenant's alike):
the caller refuses with `not_found` or tells why.
"""

from __future__ import annotations

import functools

from django.db import connection

from dispatch.models import ApprovalRequest, Permit, Principal, Proposal, Resource, Revision
from dispatch.store.sql import cache_related, columns, instances, rows, statement


@functools.cache
def _proposal_for_dispatch(vendor: str) -> str:
    return statement(
        "proposal.load_for_dispatch",
        f"SELECT {columns(Proposal, 'p')}, {columns(ApprovalRequest, 'a')}, "
        f"{columns(Permit, 'm')} FROM \"dispatch_proposal\" p "
        'LEFT JOIN "dispatch_approvalrequest" a ON a."proposal_id" = p."id" '
        'LEFT JOIN "dispatch_permit" m ON m."proposal_id" = p."id" '
        'WHERE p."id" = %(id)s AND p."tenant_id" = %(tenant_id)s')


def proposal_for_dispatch(*, id: str, tenant_id: str) -> Proposal | None:
    """Proposal `id` of tenant `tenant_id` with its approval request and its permit (each
    cached, None where there is none): what a dispatch checks."""
    found = rows(_proposal_for_dispatch(connection.vendor), {"id": id, "tenant_id": tenant_id})
    if not found:
        return None
    proposal, approval, permit = instances(found[0], Proposal, ApprovalRequest, Permit)
    cache_related(proposal, "approval", approval)
    cache_related(proposal, "permit", permit)
    return proposal  # type: ignore[no-any-return]


@functools.cache
def _approval_for_decision(vendor: str) -> str:
    return statement(
        "approval.load_for_decision",
        f"SELECT {columns(ApprovalRequest, 'a')}, {columns(Proposal, 'p')}, "
        f"{columns(Principal, 'r')} FROM \"dispatch_approvalrequest\" a "
        'JOIN "dispatch_proposal" p ON p."id" = a."proposal_id" '
        'JOIN "dispatch_principal" r ON r."id" = p."principal_id" '
        'WHERE a."id" = %(id)s AND a."tenant_id" = %(tenant_id)s')


def approval_for_decision(*, id: str, tenant_id: str) -> ApprovalRequest | None:
    """Approval request `id` of tenant `tenant_id` with its proposal and the proposal's
    requester (cached): what a decision checks."""
    found = rows(_approval_for_decision(connection.vendor), {"id": id, "tenant_id": tenant_id})
    if not found:
        return None
    approval, proposal, requester = instances(found[0], ApprovalRequest, Proposal, Principal)
    cache_related(proposal, "principal", requester)
    cache_related(approval, "proposal", proposal)
    return approval  # type: ignore[no-any-return]


@functools.cache
def _revision(vendor: str) -> str:
    return statement(
        "revision.load",
        f"SELECT {columns(Revision, 'v')}, {columns(Resource, 's')} "
        'FROM "dispatch_revision" v JOIN "dispatch_resource" s ON s."id" = v."resource_id" '
        'WHERE v."resource_id" = %(resource_id)s AND s."tenant_id" = %(tenant_id)s '
        'AND s."kind" = %(kind)s AND v."number" = %(number)s')


def revision(*, resource_id: str, tenant_id: str, kind: str, number: int) -> Revision | None:
    """Revision `number` of resource `resource_id`, a `kind` of tenant `tenant_id`, with its
    resource (cached): what an admission resolves a reference to."""
    found = rows(_revision(connection.vendor), {"resource_id": resource_id,
                                                "tenant_id": tenant_id, "kind": kind,
                                                "number": number})
    if not found:
        return None
    loaded, resource = instances(found[0], Revision, Resource)
    cache_related(loaded, "resource", resource)
    return loaded  # type: ignore[no-any-return]


_CANCELLED = statement("proposal.cancelled", 'SELECT 1 FROM "dispatch_proposal" '
                       'WHERE "id" = %(id)s AND "cancelled_at" IS NOT NULL')


def proposal_cancelled(*, id: str) -> bool:
    """Whether proposal `id` is cancelled: the check a handler makes right before its effect
    (`HandlerContext.cancelled`), as it stands now."""
    return bool(rows(_CANCELLED, {"id": id}))
