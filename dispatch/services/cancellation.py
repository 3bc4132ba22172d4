"""Cancellation (spec §9): before the claim it prevents dispatch; after the handler started it
may leave the outcome unknown, and it never frees the consumed permit."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from dispatch.models import ApprovalRequest, Attempt, Operation, Permit, Principal, Proposal
from dispatch.services.access import access_proposal_by_id
from dispatch.services.audit import audit_record
from dispatch.services.principals import has_role
from dispatch.services.proposals import resource_advance, resources_release
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    OPERATION_LIFECYCLE,
    PERMIT_LIFECYCLE,
    ApprovalEvent,
    ApprovalState,
    OperationEvent,
    OperationState,
    PermitEvent,
    PermitState,
    ResourceEvent,
)


def proposal_cancel(*, actor: Principal, proposal_id: object, now: datetime) -> Proposal:
    """Cancel a proposal's action. Returns the proposal; its operation, if any, tells the rest."""
    proposal = access_proposal_by_id(actor, proposal_id)
    if actor.id != proposal.principal_id and not has_role(actor, "operator"):
        raise Denial(DenialCode.ROLE_REQUIRED, role="operator")
    if proposal.cancelled_at is None and _cancel_before_claim(proposal, actor, now):
        proposal.refresh_from_db()
        return proposal
    operation = Operation.objects.filter(proposal_id=proposal.id).first()
    if operation is None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal is already cancelled.")
    _cancel_after_claim(operation, proposal, actor, now)  # writes no proposal column
    return proposal


def _cancel_before_claim(proposal: Proposal, actor: Principal, now: datetime) -> bool:
    """True if the action was stopped before any claim; False if a claim got there first."""
    with transaction.atomic(durable=True):
        Proposal.objects.filter(id=proposal.id, cancelled_at__isnull=True).update(
            cancelled_at=now)
        for state in (ApprovalState.PENDING, ApprovalState.GRANTED):
            ApprovalRequest.objects.filter(proposal_id=proposal.id, state=state).update(
                state=APPROVAL_LIFECYCLE.transitions[(state, ApprovalEvent.REVOKE)])
        # The claim's conditional update on this permit row serializes with this one.
        Permit.objects.filter(proposal_id=proposal.id, state=PermitState.ISSUED).update(
            state=PERMIT_LIFECYCLE.transitions[(PermitState.ISSUED, PermitEvent.REVOKE)])
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
    """After the claim: nothing started -> no effect; an attempt in flight -> unknown."""
    if operation.state != OperationState.CLAIMED:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     f"The operation is already '{operation.state}'; it cannot be cancelled.")
    started = operation.attempts_made > 0
    event = OperationEvent.UNCERTAIN if started else OperationEvent.FAIL_NO_EFFECT
    target = OPERATION_LIFECYCLE.transitions[(OperationState.CLAIMED, event)]
    with transaction.atomic(durable=True):
        moved = Operation.objects.filter(
            id=operation.id, state=OperationState.CLAIMED, attempts_made=operation.attempts_made,
        ).update(state=target, updated_at=now,
                 evidence="cancelled while an attempt was in flight" if started else "")
        if moved != 1:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                         "The operation changed meanwhile; reload it.")
        if started:
            Attempt.objects.filter(operation_id=operation.id, ended_at__isnull=True).update(
                ended_at=now, outcome=Attempt.Outcome.UNCERTAIN, error="cancelled")
        for ref in proposal.resource_refs:
            resource_advance(ref=ref, event=(ResourceEvent.UNCERTAIN if started
                                             else ResourceEvent.FAIL_NO_EFFECT), now=now)
        audit_record(tenant_id=operation.tenant_id, kind="proposal.cancelled", actor=actor.name,
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"before_claim": False, "outcome": target.value})
