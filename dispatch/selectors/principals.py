"""Read-only queries of principals and their grants: the tenant's principals (never a
sub-agent), one principal for a form, the grants as a forest of delegations, and a caller's own
grants for the REST API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from dispatch.models import Grant, Principal
from protocols.denials import Denial, DenialCode


def principal_list(*, viewer: Principal, kind: str | None = None) -> QuerySet[Principal]:
    """Principals of the viewer's tenant, by name; never a delegated step's sub-agent
    (nobody grants to it or acts as it, docs/design.md#delegation)."""
    queryset = Principal.objects.filter(tenant_id=viewer.tenant_id, subagent=False)
    if kind is not None:
        queryset = queryset.filter(kind=kind)
    return queryset.order_by("name")


def principal_get(*, viewer: Principal, principal_id: object) -> Principal:
    principal = Principal.objects.filter(id=principal_id, tenant_id=viewer.tenant_id,
                                         subagent=False).first()
    if principal is None:
        raise Denial(DenialCode.NOT_FOUND, kind="principal", id=principal_id)
    return principal


def principal_named(*, viewer: Principal, name: object, kind: str | None = None) -> Principal:
    """The principal of the viewer's tenant called `name` (of `kind`, if given), never a
    sub-agent; `not_found` otherwise, another tenant's name included."""
    queryset = principal_list(viewer=viewer, kind=kind)
    principal = queryset.filter(name=name).first() if isinstance(name, str) else None
    if principal is None:
        raise Denial(DenialCode.NOT_FOUND, kind="principal" if kind is None else kind, id=name)
    return principal


@dataclass
class GrantNode:
    grant: Grant
    children: list[GrantNode] = field(default_factory=list)


def grant_tree(*, viewer: Principal, limit: int = 2000) -> list[GrantNode]:
    """The tenant's grants as a forest: root grants, each with its delegations below it."""
    grants = list(Grant.objects.filter(tenant_id=viewer.tenant_id).select_related(
        "subject").order_by("created_at", "id")[:limit])
    nodes = {g.id: GrantNode(g) for g in grants}
    roots: list[GrantNode] = []
    for grant in grants:
        parent = nodes.get(grant.parent_id) if grant.parent_id else None
        (parent.children if parent is not None else roots).append(nodes[grant.id])
    return roots


def grants_of_principal(principal: Principal) -> QuerySet[Grant]:
    """The caller's own grants (docs/rest-api.md#calls `GET grants/`), revoked and expired ones
    included."""
    return Grant.objects.filter(subject=principal, tenant_id=principal.tenant_id).select_related(
        "subject")
