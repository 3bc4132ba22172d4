"""Every attempt after the first (docs/design.md#retries, #budgets): one function starts it.

Attempt N+1 of an operation comes from a worker's retry after an uncertain attempt, a lost
worker's attempt past its timeout, a retry that reconciliation allowed after a proven absence,
a renewed approval, or a task re-queued after it was lost. Each of them ends in
`attempt_next`, in the worker, just before any I/O: in ONE transaction it checks again what the
claim checked for attempt 1 (cancellation on the proposal's row lock, an admin's pause, which
holds the attempt back without settling the operation, the deployment, the
approval or the renewal that authorizes this attempt, the contract's retry rules, authority
share-locked so that a revocation that committed first wins and a later one waits), reserves
the attempt from the budgets, and records the attempt and its audit event. A refusal rolls all
of that back and settles the operation instead, by its one owner of moves: `unknown` when an
earlier attempt was uncertain (sticky uncertainty), `failed_no_effect` only when nothing may
have happened.

`retry_refusal` is the same decision without locks or reservations, for the callers that
decide whether to ask for a further attempt at all (the worker before its backoff,
reconciliation before moving an operation back to `claimed`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from dispatch.models import ApprovalRequest, Attempt, Operation, Proposal, Renewal
from dispatch.runtime import get_runtime
from dispatch.services.admission import admit, deployment_refusal, validate_arguments
from dispatch.services.budgets import attempt_budget, budget_take
from dispatch.services.ceilings import execution_scope_take
from dispatch.services.operations import (
    StartedAttempt,
    attempt_hold,
    attempt_open,
    operation_move,
)
from dispatch.services.pauses import attempt_paused
from dispatch.store import claims
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState, OperationEvent, OperationState


def attempt_next(
    *, operation: Operation, contract: OperationContract, now: datetime,
    lost_error: str | None = None,
) -> StartedAttempt | None:
    """Start attempt `attempts_made + 1` of a claimed operation, or settle it if that attempt
    may not run; None when it did not start (refused and settled, or another process moved
    the operation first). `lost_error`: the latest attempt is still open, its worker presumed
    lost past the contract timeout; it ends uncertain in the same transaction."""
    number = operation.attempts_made + 1
    with transaction.atomic(durable=True):
        # The proposal's row first, the order the claim and a cancellation take it in, then the
        # operation's: a cancellation that committed first is seen, a later one waits.
        uncancelled = claims.lock_uncancelled(proposal_id=operation.proposal_id)
        if lost_error is not None and not attempt_hold(
                operation, number - 1, lost_error, now, retry_at=now):
            return None
        if attempt_paused(operation):
            return None  # it waits, claimed, for the resume (docs/design.md#approval-policies)
        try:
            with transaction.atomic():  # a refusal undoes the checks' locks and reservation
                if not uncancelled:
                    raise _cancelled()
                authorized_by = attempt_checks(operation, contract, number, now, reserve=True)
                started = attempt_open(operation, number, now, details={
                    "attempt": number, "retry_of": number - 1, "authorized_by": authorized_by})
                if started is None:
                    raise _Moved  # another process started it or settled the operation
        except _Moved:
            return None
        except Denial as refusal:
            _settle_refused(operation, number, refusal, now)
            return None
    return started


class _Moved(Exception):
    """The operation moved on meanwhile: undo the reservation, start nothing."""


def attempt_checks(
    operation: Operation, contract: OperationContract, number: int, now: datetime, *,
    reserve: bool, uncertain: bool | None = None,
) -> str:
    """What attempt `number` (> 1) must meet now; what authorizes it (`retry` or `renewal`),
    or the `Denial` that says why not. `reserve=True` inside `attempt_next`'s transaction, which
    holds the proposal's row uncancelled: the grants are locked and the budget taken there.
    `uncertain`: what the operation's uncertainty will be when the attempt starts, if not what
    is stored."""
    proposal = operation.proposal
    if not reserve and Proposal.objects.filter(id=proposal.id,
                                               cancelled_at__isnull=False).exists():
        raise _cancelled()  # with `reserve`, the caller holds the proposal's row uncancelled
    moved = deployment_refusal(get_runtime(), contract, proposal)
    if moved is not None:
        raise moved
    renewed = Renewal.objects.filter(operation_id=operation.id, attempt=number,
                                     state=ApprovalState.GRANTED).exists()
    if not renewed:
        _retry_rules(operation, contract, number, now,
                     uncertain=operation.uncertain if uncertain is None else uncertain)
    admission = admit(contract, operation.principal,
                      validate_arguments(contract, proposal.arguments), now=now,
                      expect_digest=proposal.digest, lock=reserve)
    if reserve:
        budget_take(limits=attempt_budget(
            principal_id=operation.principal_id, execution_id=operation.execution_id,
            grant_id=admission.grant.id, grant_budget=admission.grant.budget, now=now),
            cost=contract.scheduling_contract.budget_cost)
        execution_scope_take(execution_id=operation.execution_id,
                             principal_id=operation.principal_id, calls=0, attempts=1, now=now)
    return "renewal" if renewed else "retry"


def retry_refusal(
    operation: Operation, contract: OperationContract, number: int, now: datetime, *,
    absence_proven: bool = False,
) -> str | None:
    """Why uncertain attempt `number` may not be followed by another under the same key, or
    None if it may (docs/design.md#reconciliation): `attempt_checks` without locks or reservation.
    `absence_proven`: an authoritative lookup past the delivery fence has just found the key
    absent."""
    try:
        attempt_checks(operation, contract, number + 1, now, reserve=False,
                       uncertain=not absence_proven)
    except Denial as refusal:
        return _reason(refusal)
    return None


def _retry_rules(
    operation: Operation, contract: OperationContract, number: int, now: datetime, *,
    uncertain: bool,
) -> None:
    """A retry that no human renewed: only where a repeat cannot be a second effect (the
    destination deduplicates on the key, or an authoritative lookup proved the key absent
    once nothing could still arrive), within the contract's attempts, under the original
    approval while it holds."""
    if not contract.retry_safe and uncertain:
        raise Denial(DenialCode.UNSAFE_RETRY, operation_id=operation.id,
                     reason="the destination does not deduplicate (idempotency none)")
    limit = contract.scheduling_contract.max_attempts
    if number > limit:
        raise Denial(DenialCode.UNSAFE_RETRY, operation_id=operation.id,
                     reason=f"all {limit} attempts used")
    permit = operation.permit
    if permit is None:
        return
    state = ApprovalRequest.objects.filter(id=permit.approval_id).values_list(
        "state", flat=True).first()
    if state == ApprovalState.REVOKED:
        raise Denial(DenialCode.APPROVAL_REVOKED, permit_id=permit.id)
    if state != ApprovalState.GRANTED or now >= permit.expires_at:
        raise Denial(DenialCode.APPROVAL_EXPIRED, permit_id=permit.id,
                     reason="the approval is no longer valid; a new approval is required")


def _cancelled() -> Denial:
    return Denial(DenialCode.PROTOCOL_STATE_INVALID, "The action was cancelled.",
                  reason="the action was cancelled")


def _reason(refusal: Denial) -> str:
    """One line for the attempt's error and the audit: why no further attempt runs."""
    reason = refusal.details.get("reason")
    if refusal.code is DenialCode.CONTRACT_MISMATCH:
        return f"contract_mismatch: {reason or 'the contract changed'} since the proposal"
    if refusal.code is DenialCode.BUDGET_EXHAUSTED:
        return f"budget_exhausted: the {refusal.details.get('budget', '')} budget is spent"
    if isinstance(reason, str):
        return reason
    return f"authority no longer valid ({refusal.code.value})"


def _settle_refused(operation: Operation, number: int, refusal: Denial, now: datetime) -> None:
    """Attempt `number` may not run: nothing is sent, and the operation ends by its history
    (`operation_move` keeps an earlier uncertainty: `unknown`)."""
    reason = f"attempt {number} refused: {_reason(refusal)}"
    operation_move(operation, OperationEvent.FAIL_NO_EFFECT,
                   attempt=number - 1, now=now, actor="dispatcher", error=reason,
                   evidence=reason if operation.uncertain else None,
                   details={"code": refusal.code.value, "refused_attempt": number,
                            **({"budget": refusal.details["budget"]}
                               if "budget" in refusal.details else {})})


#: For a destination that does not deduplicate, how many contract timeouts after the last
#: attempt started its absence is taken as final (every socket wait of a call is bounded by
#: the timeout, so a request not delivered by then is presumed never to be).
DELIVERY_FENCE_TIMEOUTS = 3


def delivery_fence(contract: OperationContract) -> timedelta:
    return timedelta(seconds=DELIVERY_FENCE_TIMEOUTS * contract.scheduling_contract.timeout)


def delivery_fenced(operation: Operation, contract: OperationContract, now: datetime) -> bool:
    """No request of any attempt of `operation` can still reach the destination: every attempt
    has ended, and the fence has passed since the last one started. Only then does an
    authoritative absence prove that nothing happened."""
    last = operation.attempts.order_by("-number").first()
    return last is None or (last.ended_at is not None
                            and now - last.started_at >= delivery_fence(contract))


def open_attempt(operation: Operation) -> Attempt | None:
    """The operation's attempt still open (a worker inside it, or lost), or None."""
    if operation.attempts_made == 0 or operation.state != OperationState.CLAIMED:
        return None
    return Attempt.objects.filter(operation_id=operation.id, ended_at__isnull=True).first()
