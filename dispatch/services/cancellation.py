"""Cancellation (docs/design.md#cancellation), at each point of an action's life:

- before the claim it prevents dispatch: the proposal is withdrawn, its approval and permit
  revoked, its resources released;
- after the claim, while no attempt is open (before attempt 1, or between attempts: a retry's
  backoff, a reconciliation's or a renewal's move back to `claimed`), the operation ends at once
  through its one owner of moves, as the settlement of its latest attempt;
- during an attempt the handler is asked to stop (`HandlerContext.cancelled`) and the attempt's
  own answer is the outcome; the cancellation waits for that answer (`CANCEL_WAIT_SECONDS`), so
  that what it returns is terminal wherever the handler stops when asked.

It never frees the consumed permit. A cancellation is recorded once (`Proposal.cancelled_at`) and
audited with its actor and its reason; a second one is refused as already cancelled
(`protocol_state_invalid`, naming the operation's state).
"""

from __future__ import annotations

import time
from datetime import datetime

from django.conf import settings
from django.db import transaction

from dispatch.failpoints import failpoint
from dispatch.models import ApprovalRequest, Attempt, Execution, Operation, Principal, Proposal
from dispatch.services.access import access_operation_by_id, access_proposal_by_id
from dispatch.services.approvals import approval_move
from dispatch.services.audit import audit_binding, audit_record, audit_text
from dispatch.services.authority import require_role
from dispatch.services.operations import operation_move
from dispatch.services.resources import resources_release
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    ApprovalEvent,
    ApprovalState,
    OperationEvent,
    OperationState,
    ResourceEvent,
    sources,
)
from protocols.roles import Role

#: The longest reason a cancellation keeps.
REASON_MAX = 1000


def proposal_cancel(
    *, actor: Principal, proposal_id: object, now: datetime, reason: str = "",
) -> Proposal:
    """Cancel a proposal's action, whatever point it reached. Returns the proposal; its
    operation, if any, tells the rest."""
    proposal = access_proposal_by_id(actor, proposal_id)
    _require_canceller(actor, proposal)
    if proposal.cancelled_at is None and _cancel_before_claim(proposal, actor, now, reason):
        proposal.refresh_from_db()
        return proposal
    operation = Operation.objects.select_related("proposal").filter(
        proposal_id=proposal.id).first()
    if operation is None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal is already cancelled.")
    _cancel_after_claim(operation, actor, now, reason)
    proposal.refresh_from_db(fields=["cancelled_at"])
    return proposal


def operation_cancel(
    *, actor: Principal, operation_id: object, now: datetime, reason: str = "",
) -> Operation:
    """Cancel a claimed operation. Returns it as it now stands: ended if no attempt was open
    (`failed_no_effect`, unless its owner of moves decides that its history allows only
    `unknown`), still `claimed` while an attempt in flight answers for itself."""
    operation = access_operation_by_id(actor, operation_id)
    proposal = operation.proposal
    _require_canceller(actor, proposal)
    _cancel_after_claim(operation, actor, now, reason)
    operation.refresh_from_db()
    return operation


def _require_canceller(actor: Principal, proposal: Proposal) -> None:
    """The principal that proposed, the principal whose run encloses the action (a delegated
    sub-agent's, docs/design.md#run-trees), or a human who operates (an admin does too)."""
    if actor.id == proposal.principal_id:
        return
    if Execution.objects.filter(id=proposal.execution_id, principal_id=proposal.principal_id,
                                root__principal_id=actor.id).exists():
        return
    require_role(actor, Role.OPERATOR)


def _reason_details(proposal: Proposal, reason: str) -> dict[str, str]:
    # A reason may quote the action's values: the audit keeps it masked (docs/design.md#audit).
    reason = reason[:REASON_MAX]
    return {"reason": audit_text(proposal, reason)} if reason else {}


def _cancel_before_claim(
    proposal: Proposal, actor: Principal, now: datetime, reason: str,
) -> bool:
    """True if the action was stopped before any claim; False if a claim got there first."""
    with transaction.atomic(durable=True):
        withdrawn = Proposal.objects.filter(id=proposal.id, cancelled_at__isnull=True).update(
            cancelled_at=now)
        if withdrawn != 1:
            transaction.set_rollback(True)  # another cancellation got there first
            return False
        # The request's row lock, so that a grant that committed first is seen (its permit
        # is revoked with it) and one that comes later finds it revoked. The claim's
        # conditional update on the permit row serializes with the revocation's.
        approval = ApprovalRequest.objects.select_for_update().filter(
            proposal_id=proposal.id).first()
        if approval is not None and ApprovalState(approval.state) in sources(
                APPROVAL_LIFECYCLE, ApprovalEvent.REVOKE):
            approval_move(approval, ApprovalEvent.REVOKE, now=now, actor=actor.name,
                          within="proposal.cancelled")
        if Operation.objects.filter(proposal_id=proposal.id).exists():
            transaction.set_rollback(True)  # a claim won the race: cancel after the claim
            return False
        resources_release(proposal=proposal, event=ResourceEvent.EXPIRE, actor=actor.name,
                          now=now)
        audit_record(tenant_id=proposal.tenant_id, kind="proposal.cancelled", actor=actor.name,
                     at=now, proposal_id=proposal.id, digest=proposal.digest,
                     details={"before_claim": True, **_reason_details(proposal, reason)})
    return True


def _cancel_after_claim(
    operation: Operation, actor: Principal, now: datetime, reason: str,
) -> None:
    """After the claim. With no attempt open, nothing can be under way: the operation ends now
    by `fail_no_effect` as the settlement of its latest attempt (0: none; the owner of moves
    decides what that attempt's history allows), and a task that comes later finds it settled.
    An attempt in flight is asked to stop instead: it answers `failed_no_effect` if it stopped
    before its effect, and what happened otherwise; a worker that never answers is made
    `unknown` by reconciliation. The consumed permit is never freed."""
    proposal = operation.proposal
    with transaction.atomic(durable=True):
        # The proposal row first, as the claim takes it; the flag is what the handler's context
        # and every later attempt look at.
        requested = Proposal.objects.filter(id=proposal.id, cancelled_at__isnull=True).update(
            cancelled_at=now)
        # Every move of the operation and every attempt start updates this row first: while it
        # is held, no attempt opens or closes.
        current = Operation.objects.select_for_update().select_related("proposal").get(
            id=operation.id)
        failpoint("cancel.locked")
        if current.state != OperationState.CLAIMED:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID, _settled_message(
                current, already_cancelled=requested != 1), state=current.state)
        attempt = current.attempts_made
        in_flight = attempt > 0 and Attempt.objects.filter(
            operation_id=current.id, number=attempt, ended_at__isnull=True).exists()
        if requested != 1 and in_flight:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                         "The action is already cancelled; the attempt in flight settles it.",
                         state=current.state)
        # (A cancellation recorded during an attempt that then ended without settling the
        # operation finds no attempt open when repeated: it ends the operation now.)
        ended = not in_flight and operation_move(
            current, OperationEvent.FAIL_NO_EFFECT, attempt=attempt, now=now,
            actor=actor.name, error=("cancelled before any attempt" if attempt == 0 else
                                     f"cancelled after attempt {attempt}, before another"),
            details={"cancelled": True})
        audit_record(tenant_id=current.tenant_id, kind="proposal.cancelled", actor=actor.name,
                     at=now, operation_id=current.id, proposal_id=current.proposal_id,
                     digest=proposal.digest,
                     details={"before_claim": False, "attempt": attempt,
                              **({"outcome": current.state} if ended
                                 else {"attempt_in_flight": True}),
                              **_reason_details(proposal, reason),
                              **audit_binding(proposal)})
    if in_flight:
        _await_answer(operation.id, attempt)


def _await_answer(operation_id: str, attempt: int) -> None:
    """Wait, at most `CANCEL_WAIT_SECONDS`, for the attempt in flight to answer: a handler that
    stops on its cancelled context ends it before any effect, and the caller then hears the
    outcome, not a promise (docs/design.md#cancellation: terminal and effect-safe). One that does
    not answer in time leaves the operation `claimed`, its outcome to come."""
    deadline = time.monotonic() + float(settings.CANCEL_WAIT_SECONDS)
    while time.monotonic() < deadline:
        if Attempt.objects.filter(operation_id=operation_id, number=attempt,
                                  ended_at__isnull=False).exists():
            return
        time.sleep(0.02)


def _settled_message(operation: Operation, *, already_cancelled: bool) -> str:
    if already_cancelled:
        return f"The action is already cancelled; the operation is '{operation.state}'."
    return f"The operation is already '{operation.state}'; it cannot be cancelled."
