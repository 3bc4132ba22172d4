"""THE claim (DESIGN §5 steps 6-7, spec §6.3): one transaction that claims the permit, moves
each resource to `dispatching` by compare-and-swap, inserts the operation intent `claimed` and
its audit event, and takes the budget. If any part fails, all of it rolls back and nothing runs.

The winner is decided by conditional UPDATEs whose row counts are read, never by a read
followed by an unconditional write: on PostgreSQL a concurrent claimer blocks on the row lock
and then re-evaluates the WHERE clause against the committed row; on SQLite the transaction
begins IMMEDIATE and so holds the database's write lock from its first statement.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from dispatch.failpoints import failpoint
from dispatch.models import Operation, Permit, Proposal
from dispatch.services.audit import audit_record
from dispatch.services.budgets import Limits, budget_take
from dispatch.services.operations import operation_open
from dispatch.services.permits import permit_move
from dispatch.services.resources import resource_move
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import PermitEvent, PermitState, ResourceEvent


def operation_claim(
    *, proposal: Proposal, permit: Permit | None, operation_id: str, actor: str, now: datetime,
    budget: Limits, cost: int,
) -> Operation:
    """Claim one proposal's action, or raise the denial that says why not.

    Inside the dispatch's transaction (its own, or a savepoint of the grant's when an approval
    dispatches on grant), after the checks that read the grants share-locked: locks go grants
    first, then the permit, the order a revocation takes them in. A denial raised here rolls
    the whole transaction back. The worker is handed the operation only once the outermost
    transaction commits (`transaction.on_commit`), so nothing runs unless the claim committed.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("operation_claim runs inside the dispatch's transaction")
    if permit is not None:
        # One-shot: only an issued, unexpired permit bound to this digest moves.
        won = permit_move(event=PermitEvent.CLAIM, now=now, id=permit.id,
                          proposal_id=proposal.id, digest=proposal.digest,
                          expires_at__gt=now)
        if won != 1:
            raise _permit_denial(permit, now)
    else:
        # No permit to lock: the proposal row is the lock a cancellation contends on.
        open_ = Proposal.objects.filter(
            id=proposal.id, cancelled_at__isnull=True).update(cancelled_at=None)
        if open_ != 1:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal was cancelled.")
    for ref in proposal.resource_refs:
        # Compare-and-swap on revision and state: two permits naming one revision
        # cannot both move it to dispatching.
        resource_move(ref=ref, event=ResourceEvent.CLAIM, now=now)
    try:
        operation = operation_open(proposal=proposal, permit=permit,
                                   operation_id=operation_id, now=now)
    except IntegrityError:
        # One operation per proposal: a concurrent claim of the same action won. The
        # denial leaves the block at once, so the whole transaction rolls back.
        raise Denial(DenialCode.PERMIT_CLAIMED, proposal_id=proposal.id) from None
    audit_record(
        tenant_id=proposal.tenant_id, kind="permit.claimed", actor=actor, at=now,
        operation_id=operation_id, proposal_id=proposal.id, digest=proposal.digest,
        details={"permit_id": permit.id if permit else None},
    )
    # Last, so that the hot per-principal counter row is locked for the shortest time.
    budget_take(limits=budget, cost=cost)
    failpoint("claim.before_commit")
    return operation


def _permit_denial(permit: Permit, now: datetime) -> Denial:
    # Failure path only: one more read to say why the permit did not move.
    state = Permit.objects.filter(id=permit.id).values_list("state", flat=True).first()
    if state == PermitState.REVOKED:
        return Denial(DenialCode.APPROVAL_REVOKED, permit_id=permit.id)
    if state == PermitState.EXPIRED or (state == PermitState.ISSUED and now >= permit.expires_at):
        return Denial(DenialCode.APPROVAL_EXPIRED, permit_id=permit.id)
    return Denial(DenialCode.PERMIT_CLAIMED, permit_id=permit.id)
