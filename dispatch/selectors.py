"""Read-only queries for the console and the API (the console reads here, writes via services).

Every function takes the viewing principal and scopes by its tenant, so no page can show another
tenant's rows. Lists are keyset-paged on an indexed ordering and never count a whole table:
counts are capped (`count_capped`), so a queue of 100,000 pending rows costs the same as one
of 100. The evidence chain's queries (docs/design.md#evidence) live in `dispatch.evidence_selectors`
and are re-exported here, so the console still reads through this one module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar

from django.db.models import Prefetch, Q, QuerySet, prefetch_related_objects

from dispatch.evidence_selectors import ChainEvent as ChainEvent
from dispatch.evidence_selectors import CitedReceipt as CitedReceipt
from dispatch.evidence_selectors import EvidenceChain as EvidenceChain
from dispatch.evidence_selectors import PublicationEvidence as PublicationEvidence
from dispatch.evidence_selectors import publication_evidence as publication_evidence
from dispatch.evidence_selectors import question_evidence_chain as question_evidence_chain
from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    Decision,
    Grant,
    Operation,
    Principal,
    Renewal,
    Resource,
    Revision,
    TranscriptEntry,
)
from dispatch.presentation import MessagePresentation, Summary, summarize
from dispatch.runtime import get_runtime
from dispatch.services.access import access_approval_for_review, access_operation_for_page
from dispatch.services.authority import has_role
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState, OperationState
from protocols.roles import Role
from protocols.usage import Usage

T = TypeVar("T")

# Queue and list pages never count past this; the page says "1,000+".
COUNT_CAP = 1000


@dataclass(frozen=True)
class Page(Generic[T]):
    """One keyset page: `rows` in display order, and the cursors of its ends when more exist."""

    rows: list[T]
    older: tuple[Any, ...] | None = None  # cursor to pass as `after` for the next page
    newer: tuple[Any, ...] | None = None  # cursor to pass as `before` for the previous page


@dataclass(frozen=True)
class Count:
    value: int
    capped: bool


def count_capped(queryset: QuerySet[Any], cap: int = COUNT_CAP) -> Count:
    """COUNT(*) over at most `cap + 1` rows of an indexed query (a LIMITed subquery)."""
    found = queryset.order_by().values("pk")[: cap + 1].count()
    return Count(value=min(found, cap), capped=found > cap)


def _keyset(
    queryset: QuerySet[Any], *, keys: tuple[str, str], after: Sequence[Any] | None,
    before: Sequence[Any] | None, limit: int,
) -> Page[Any]:
    """Newest-first keyset paging on the pair `keys` (a timestamp and a unique tiebreaker).

    `after` continues below a cursor (older rows), `before` above it (newer rows). The first
    conjunct of each bound is a plain range on the leading key, so the database can use it as
    an index condition; the OR only filters rows that share the cursor's timestamp.
    """
    first, second = keys
    if before is not None:
        at, tie = before
        rows = list(queryset.filter(**{f"{first}__gte": at}).filter(
            Q(**{f"{first}__gt": at}) | Q(**{f"{second}__gt": tie}),
        ).order_by(first, second)[: limit + 1])
        more_newer = len(rows) > limit
        rows = rows[:limit][::-1]
        return Page(rows=rows, older=_cursor(rows[-1], keys) if rows else None,
                    newer=_cursor(rows[0], keys) if rows and more_newer else None)
    if after is not None:
        at, tie = after
        queryset = queryset.filter(**{f"{first}__lte": at}).filter(
            Q(**{f"{first}__lt": at}) | Q(**{f"{second}__lt": tie}))
    rows = list(queryset.order_by(f"-{first}", f"-{second}")[: limit + 1])
    more_older = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, older=_cursor(rows[-1], keys) if more_older else None,
                newer=_cursor(rows[0], keys) if rows and after is not None else None)


def _cursor(row: Any, keys: tuple[str, str]) -> tuple[Any, ...]:
    return tuple(getattr(row, key) for key in keys)


# --- principals and contracts -------------------------------------------------------------------


def principal_list(*, viewer: Principal, kind: str | None = None) -> QuerySet[Principal]:
    """Principals of the viewer's tenant, by name; never a delegated step's sub-agent
    (nobody grants to it or acts as it, docs/design.md#delegation)."""
    queryset = Principal.objects.filter(tenant_id=viewer.tenant_id, subagent=False)
    if kind is not None:
        queryset = queryset.filter(kind=kind)
    return queryset.order_by("name")


def operation_names(*, approval_only: bool = False) -> list[str]:
    """Qualified names of the registered contracts (those needing approval, if asked)."""
    names = {c.qualified_name for c in get_runtime().registry
             if not approval_only or c.requires_approval}
    return sorted(names)


def contract_for_fingerprint(fingerprint: str) -> OperationContract | None:
    """The registered contract a proposal was made under, or None if it is gone."""
    return get_runtime().registry.by_fingerprint(fingerprint)


def action_summary(operation: str, contract: OperationContract | None,
                   arguments: JSONObject) -> Summary:
    """The sentence on top of an approval (`dispatch.presentation.summarize`): the one its
    contract's extension declared, or `<operation> with N arguments`."""
    summarizer = None if contract is None else get_runtime().summaries.get(
        (contract.qualified_name, contract.contract_version))
    return summarize(summarizer, operation, arguments)


def resource_presentations(
    contract: OperationContract | None,
) -> dict[str, tuple[str, MessagePresentation]]:
    """For each resource argument of `contract` whose kind declares how its payload reads:
    the kind and its presentation, by argument name."""
    if contract is None:
        return {}
    declared = get_runtime().presentations
    return {argument: (kind, declared[kind])
            for argument, kind in sorted(contract.protocol_preconditions.items())
            if kind in declared}


def principal_get(*, viewer: Principal, principal_id: object) -> Principal:
    principal = Principal.objects.filter(id=principal_id, tenant_id=viewer.tenant_id,
                                         subagent=False).first()
    if principal is None:
        raise Denial(DenialCode.NOT_FOUND, kind="principal", id=principal_id)
    return principal


def operation_authority_keys() -> dict[str, list[str]]:
    """For each registered operation, the grant scope keys its authority requirements name."""
    keys: dict[str, list[str]] = {}
    for contract in get_runtime().registry:
        keys[contract.qualified_name] = sorted({r.key for r in contract.authority_requirements})
    return keys


# --- the approval queue -------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFilter:
    operation: str = ""
    principal_id: str = ""
    created_after: datetime | None = None
    created_before: datetime | None = None


def _pending_approvals(viewer: Principal, filters: QueueFilter) -> QuerySet[ApprovalRequest]:
    """Pending approvals the viewer may decide, through the `approval_queue` index.

    No condition on `expires_at` here: it would lead the planner to the `approval_expiry`
    index and a sort of every pending row. A request past its expiry stays `pending` only until
    the next expiry sweep; pages mark it as expired, and the resolver refuses it anyway.
    """
    queryset = ApprovalRequest.objects.filter(
        tenant_id=viewer.tenant_id, state=ApprovalState.PENDING)
    if not has_role(viewer, Role.ADMIN):
        # An admin holds every role; anyone else sees only requests for their own role.
        queryset = queryset.filter(role=viewer.role)
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
    return _keyset(queryset, keys=("created_at", "id"), after=after, before=before,
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
        return Page(rows=rows, older=_cursor(rows[-1], ("expires_at", "id")) if rows else None,
                    newer=_cursor(rows[0], ("expires_at", "id"))
                    if rows and more_sooner else None)
    if after is not None:
        at, tie = after
        queryset = queryset.filter(expires_at__gte=at).filter(
            Q(expires_at__gt=at) | Q(id__gt=tie))
    rows = list(queryset.order_by("expires_at", "id")[: limit + 1])
    more_later = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, older=_cursor(rows[-1], ("expires_at", "id")) if more_later else None,
                newer=_cursor(rows[0], ("expires_at", "id"))
                if rows and after is not None else None)


def approval_count_pending(*, viewer: Principal, filters: QueueFilter = QueueFilter()) -> Count:
    return count_capped(_pending_approvals(viewer, filters))


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


# --- operations ---------------------------------------------------------------------------------


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
    return _keyset(queryset, keys=("updated_at", "id"), after=after, before=before,
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


def approval_for_proposal(*, viewer: Principal, proposal_id: str) -> ApprovalRequest | None:
    return ApprovalRequest.objects.filter(tenant_id=viewer.tenant_id,
                                          proposal_id=proposal_id).first()


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
    return _keyset(queryset, keys=("claimed_at", "id"), after=after, before=before,
                   limit=limit)


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
    return _keyset(queryset, keys=("decided_at", "id"), after=after, before=before,
                   limit=limit)


# --- grants -------------------------------------------------------------------------------------


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


def execution_usage(execution_id: str, *, principal_id: str) -> Usage:
    """The model usage an execution of `principal_id` records, summed over its turns
    (docs/design.md#budgets): what the adapter reported, accounting only. A proposal's
    `execution_id` is the caller's word, so only an execution of the proposal's own principal
    counts."""
    totals = {"input_tokens": 0, "output_tokens": 0}
    cost = Decimal(0)
    for payload in TranscriptEntry.objects.filter(
            execution_id=execution_id, execution__principal_id=principal_id,
            kind__in=[TranscriptEntry.Kind.TOOL_CALL, TranscriptEntry.Kind.FINAL],
    ).values_list("payload", flat=True):
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if usage:
            totals["input_tokens"] += int(usage.get("input_tokens", 0))
            totals["output_tokens"] += int(usage.get("output_tokens", 0))
            cost += Decimal(str(usage.get("cost", "0")))
    return Usage(**totals, cost=str(cost))


def renewal_pending(*, viewer: Principal, operation: Operation) -> Renewal | None:
    """The operation's renewal still waiting for a decision, if any (of the viewer's tenant)."""
    return Renewal.objects.select_related("requested_by").filter(
        operation_id=operation.id, tenant_id=viewer.tenant_id,
        state=ApprovalState.PENDING).order_by("-attempt").first()


def renewal_get(*, viewer: Principal, renewal_id: str) -> Renewal | None:
    return Renewal.objects.filter(id=renewal_id, tenant_id=viewer.tenant_id).first()
