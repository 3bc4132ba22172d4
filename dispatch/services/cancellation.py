"""Cancellation (spec §9): before the claim it prevents dispatch; after the claim, before any
attempt, the action is definitely not performed; during an attempt the handler is asked to stop
and the attempt's own answer is the outcome. It never frees the consumed permit."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from dispatch.models import Operation, Principal, Proposal
from dispatch.services.access import access_proposal_by_id
from dispatch.services.approvals import approval_move
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.services.operations import operation_move
from dispatch.services.permits import permit_move
from dispatch.services.resources import resources_release
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    ApprovalEvent,
    OperationEvent,
    OperationState,
    PermitEvent,
    ResourceEvent,
    sources,
)
from protocols.roles import Role


def proposal_cancel(*, actor: Principal, proposal_id: object, now: datetime) -> Proposal:
    """Cancel a proposal's action. Returns the proposal; its operation, if any, tells the rest."""
    proposal = access_proposal_by_id(actor, proposal_id)
    if actor.id != proposal.principal_id:
        require_role(actor, Role.OPERATOR)  # the requester, or a human who operates
    if proposal.cancelled_at is None and _cancel_before_claim(proposal, actor, now):
        proposal.refresh_from_db()
        return proposal
    operation = Operation.objects.select_related("proposal").filter(
        proposal_id=proposal.id).first()
    if operation is None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal is already cancelled.")
    _cancel_after_claim(operation, proposal, actor, now)
    proposal.refresh_from_db(fields=["cancelled_at"])
    return proposal


def _cancel_before_claim(proposal: Proposal, actor: Principal, now: datetime) -> bool:
    """True if the action was stopped before any claim; False if a claim got there first."""
    with transaction.atomic(durable=True):
        Proposal.objects.filter(id=proposal.id, cancelled_at__isnull=True).update(
            cancelled_at=now)
        for state in sources(APPROVAL_LIFECYCLE, ApprovalEvent.REVOKE):
            approval_move(event=ApprovalEvent.REVOKE, source=state, proposal_id=proposal.id)
        # The claim's conditional update on this permit row serializes with this one.
        permit_move(event=PermitEvent.REVOKE, now=now, proposal_id=proposal.id)
        if Operation.objects.filter(proposal_id=proposal.id).exists():
            transaction.set_rollback(True)  # a claim won the race: cancel after the claim
            return False
        resources_release(proposal=proposal, event=ResourceEvent.EXPIRE, now=now)
        audit_record(tenant_id=proposal.tenant_id, kind="proposal.cancelled", actor=actor.name,
                     at=now, proposal_id=proposal.id, digest=proposal.digest,
                     details={"before_claim": True})
    return True


def _cancel_after_claim(
    operation: Operation, proposal: Proposal, actor: Principal, now: datetime,
) -> None:
    """After the claim: nothing started -> no effect at once. An attempt in flight is asked to
    stop (its handler sees `HandlerContext.cancelled`): it answers `failed_no_effect` if it
    stopped before its effect, and what happened otherwise; a worker that never answers is
    made `unknown` by reconciliation. The consumed permit is never freed."""
    if operation.state != OperationState.CLAIMED:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     f"The operation is already '{operation.state}'; it cannot be cancelled.")
    if operation.attempts_made == 0 and operation_move(
            operation=operation, event=OperationEvent.FAIL_NO_EFFECT, attempt=0, now=now,
            actor=actor.name, error="cancelled before any attempt",
            details={"cancelled": True}):
        with transaction.atomic():
            audit_record(tenant_id=operation.tenant_id, kind="proposal.cancelled",
                         actor=actor.name, at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id,
                         details={"before_claim": False, "outcome": operation.state})
        return
    with transaction.atomic(durable=True):
        requested = Proposal.objects.filter(id=proposal.id, cancelled_at__isnull=True).update(
            cancelled_at=now)
        if requested != 1:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                         "Cancellation was already requested; the attempt in flight settles it.")
        audit_record(tenant_id=operation.tenant_id, kind="proposal.cancelled", actor=actor.name,
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"before_claim": False, "attempt_in_flight": True})
