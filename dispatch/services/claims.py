"""THE claim (docs/design.md#dispatcher steps 6-7, docs/design.md#permits): one transaction that
checks that nothing paused it, claims the permit, moves each resource to `dispatching` by
compare-and-swap, inserts the operation intent `claimed` and its audit event, and takes the budget
and the spend caps. If any part fails, all of it rolls back and nothing runs.

The winner is decided by conditional UPDATEs whose row counts are read, never by a read
followed by an unconditional write: on PostgreSQL a concurrent claimer blocks on the row lock
and then re-evaluates the WHERE clause against the committed row; on SQLite the transaction
begins IMMEDIATE and so holds the database's write lock from its first statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import IntegrityError, transaction

from dispatch.failpoints import failpoint
from dispatch.models import Operation, Permit, Proposal
from dispatch.services.audit import audit_binding, audit_values
from dispatch.services.budgets import Limits, budget_take
from dispatch.services.caps import caps_take
from dispatch.services.ceilings import (
    execution_scope_take,
    principal_claims_counter,
    principal_concurrency_take,
)
from dispatch.services.operations import OPERATION_CLAIMED
from dispatch.services.pauses import pause_check
from dispatch.services.resources import moved_refs, resource_move
from dispatch.store import claims, operations
from dispatch.store.sql import cache_related, is_postgres
from protocols.approval_rules import CapCharge
from protocols.audit_kinds import OPERATION_EVENT_KINDS, audit_moves
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import OperationEvent, PermitState, ResourceEvent

_CLAIMED = OPERATION_EVENT_KINDS[OperationEvent.CLAIM]  # the audit kind of a claim


def operation_claim(
    *, proposal: Proposal, permit: Permit | None, operation_id: str, actor: str, now: datetime,
    budget: Limits, cost: int, caps: Sequence[CapCharge] = (),
) -> Operation:
    """Claim one proposal's action, or raise the denial that says why not.

    Inside the dispatch's transaction (its own; on the worker-claim path it starts attempt 1
    too), after the checks that read the grants share-locked: locks go grants
    first, then the permit, the order a revocation takes them in. A denial raised here rolls
    the whole transaction back. The worker is handed the operation only once the outermost
    transaction commits (`transaction.on_commit`), so nothing runs unless the claim committed.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("operation_claim runs inside the dispatch's transaction")
    # First: an admin's pause that committed before this claim refuses it
    # (docs/design.md#approval-policies); the tenant's row stays share-locked until the commit.
    pause_check(tenant_id=proposal.tenant_id, operation=proposal.operation,
                agent_id=proposal.principal_id, execution_id=proposal.execution_id)
    failpoint("claim.pause_checked")
    operation = Operation(
        id=operation_id, tenant_id=proposal.tenant_id, proposal_id=proposal.id, permit=permit,
        principal_id=proposal.principal_id, execution_id=proposal.execution_id,
        operation=proposal.operation, contract_fingerprint=proposal.contract_fingerprint,
        state=OPERATION_CLAIMED, attempts_made=0, evidence="", claimed_at=now, updated_at=now)
    row = operations.claimed(
        id=operation.id, tenant_id=operation.tenant_id, proposal_id=operation.proposal_id,
        permit_id=permit.id if permit else None, principal_id=operation.principal_id,
        execution_id=operation.execution_id, operation=operation.operation,
        contract_fingerprint=operation.contract_fingerprint, now=now)
    event = audit_values(tenant_id=proposal.tenant_id, kind=_CLAIMED, actor=actor,
                         at=now, operation_id=operation_id, proposal_id=proposal.id,
                         digest=proposal.digest,
                         details={"permit_id": permit.id if permit else None,
                                  **audit_binding(proposal),
                                  **audit_moves(moved_refs(proposal.resource_refs),
                                                ResourceEvent.CLAIM)})
    # One-shot: only an issued, unexpired permit bound to this digest moves; with no permit,
    # the proposal row is the lock a cancellation contends on.
    try:
        if is_postgres() and not moved_refs(proposal.resource_refs):
            # One round trip: the lock, the intent and its audit row, each only if the one
            # before it happened.
            if not claims.claim(operation=row, digest=proposal.digest, now=now, event=event):
                raise _lock_denial(permit, now)
        else:
            # SQLite: the transaction holds the database's write lock since BEGIN IMMEDIATE,
            # and the proposal was read inside it, open: no cancellation can commit before
            # this claim does, so there is no row to lock for a proposal without a permit.
            if (permit is not None or is_postgres()) and not claims.lock(
                    proposal_id=proposal.id, permit_id=permit.id if permit else None,
                    digest=proposal.digest, now=now):
                raise _lock_denial(permit, now)
            for ref in moved_refs(proposal.resource_refs):
                # Compare-and-swap on revision and state: two permits naming one revision
                # cannot both move it to dispatching.
                resource_move(ref, ResourceEvent.CLAIM, now=now)
            claims.record(operation=row, event=event)
    except IntegrityError:
        # One operation per proposal: a concurrent claim of the same action won. The denial
        # leaves the transaction at once, so all of it rolls back.
        raise Denial(DenialCode.PERMIT_CLAIMED, proposal_id=proposal.id) from None
    operation._state.adding = False  # in the store now, as if loaded
    cache_related(operation, "proposal", proposal)  # its attempts and outcome need no read
    # Last, so that the hot per-principal counter row is locked for the shortest time.
    budget_take(limits=[*budget, *principal_claims_counter(proposal.principal_id)], cost=cost)
    caps_take(caps)  # after the budget's counters: every claimer locks them in one order
    execution_scope_take(execution_id=proposal.execution_id,
                         principal_id=proposal.principal_id, calls=cost, attempts=1, now=now,
                         claim=operation)
    principal_concurrency_take(principal_id=proposal.principal_id, operation_id=operation.id)
    failpoint("claim.before_commit")
    return operation


def _lock_denial(permit: Permit | None, now: datetime) -> Denial:
    if permit is None:
        return Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal was cancelled.")
    return _permit_denial(permit, now)


def _permit_denial(permit: Permit, now: datetime) -> Denial:
    # Failure path only: one more read to say why the permit did not move.
    state = Permit.objects.filter(id=permit.id).values_list("state", flat=True).first()
    if state == PermitState.REVOKED:
        return Denial(DenialCode.APPROVAL_REVOKED, permit_id=permit.id)
    if state == PermitState.EXPIRED or (state == PermitState.ISSUED and now >= permit.expires_at):
        return Denial(DenialCode.APPROVAL_EXPIRED, permit_id=permit.id)
    return Denial(DenialCode.PERMIT_CLAIMED, permit_id=permit.id)
