"""Read-only queries for the console's pages of unknown outcomes and their renewed approvals
(docs/design.md#renewals): the renewals an operator may decide, for the queue; one renewal for
its decision page; the latest renewal of an operation and the one still pending; and how to
check an operation's destination. Who may decide is the renewal service's rule
(`renewal_decider_refusal`), asked here, not restated."""

from __future__ import annotations

from dispatch.models import Operation, Principal, Renewal
from dispatch.runtime import get_runtime
from dispatch.services.authority import has_role
from dispatch.services.renewals import renewal_decider_refusal, renewal_deciding_role
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState

#: At most this many renewals head the queue (they are rare: one per stopped operation).
QUEUE_LIMIT = 50


def renewal_list_decidable(*, viewer: Principal, limit: int = QUEUE_LIMIT) -> list[Renewal]:
    """Pending renewals of the viewer's tenant that the viewer may decide, newest first.

    A renewal past its window stays `pending` until it is asked about again; the page marks
    it expired and the decision refuses it anyway."""
    queryset = Renewal.objects.select_related(
        "operation", "operation__proposal", "operation__principal", "requested_by",
    ).filter(tenant_id=viewer.tenant_id, state=ApprovalState.PENDING).exclude(
        requested_by_id=viewer.id).exclude(operation__principal_id=viewer.id).order_by(
        "-created_at", "-id")
    return [renewal for renewal in queryset[: limit * 2]
            if renewal_decider_refusal(viewer, renewal) is None][:limit]


def renewal_get_for_review(*, viewer: Principal, renewal_id: object) -> Renewal:
    """One renewal of the viewer's tenant for its page, to a human of the role that decides
    it (its requester included, who sees it but cannot decide it). Another tenant's id, a
    forged id and a renewal for a role the viewer does not hold are one `not_found`, as an
    approval's page answers."""
    if not isinstance(renewal_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind="renewal")
    renewal = Renewal.objects.select_related(
        "operation", "operation__proposal", "operation__principal", "requested_by",
        "approver").filter(id=renewal_id, tenant_id=viewer.tenant_id).first()
    if renewal is None or not has_role(viewer, renewal_deciding_role(renewal)):
        raise Denial(DenialCode.NOT_FOUND, kind="renewal", id=renewal_id)
    return renewal


def renewal_withdrawn_resolution(renewal: Renewal) -> str:
    """What the operation of a withdrawn renewal was resolved as (`completed`, `no_effect`),
    or "" when the renewal was not withdrawn by a resolution."""
    if renewal.state != ApprovalState.REVOKED:
        return ""
    state = renewal.operation.state
    return {"reconciled_completed": "completed",
            "reconciled_no_effect": "no_effect"}.get(state, "")


def renewal_latest(*, viewer: Principal, operation: Operation) -> Renewal | None:
    """The operation's most recent renewal, whatever its state (of the viewer's tenant)."""
    return Renewal.objects.filter(operation_id=operation.id, tenant_id=viewer.tenant_id).order_by(
        "-created_at", "-id").first()


def how_to_check(operation: Operation) -> str:
    """How to check the operation's destination for its effect, as the contract's extension
    registered it ("" when it said nothing, or the contract is gone)."""
    runtime = get_runtime()
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    return "" if contract is None else runtime.how_to_check(contract, operation.id)


def renewal_pending(*, viewer: Principal, operation: Operation) -> Renewal | None:
    """The operation's renewal still waiting for a decision, if any (of the viewer's tenant)."""
    return Renewal.objects.select_related("requested_by").filter(
        operation_id=operation.id, tenant_id=viewer.tenant_id,
        state=ApprovalState.PENDING).order_by("-attempt").first()


def renewal_get(*, viewer: Principal, renewal_id: str) -> Renewal | None:
    return Renewal.objects.filter(id=renewal_id, tenant_id=viewer.tenant_id).first()
