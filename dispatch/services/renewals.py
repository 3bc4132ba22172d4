"""Renewed approval for the same operation (docs/design.md#renewals): `renewal_move` is the one
owner of `Renewal.state`, by `protocols.lifecycle.RENEWAL_LIFECYCLE`.

An operation that stopped short of an outcome (`unknown`: its permit or authority lapsed
before a further attempt, or its retries ran out, or a lookup found the effect authoritatively
absent) is never proposed again under a new operation id, which would be a new idempotency key
and so maybe a second effect. Instead an admin, or the agent that asked for it, requests a
renewal: a new human decision bound to the same operation id and digest, for attempt N+1.
A grant re-checks authority and the deployment, then moves the operation back to `claimed`
in the same transaction; the worker runs attempt N+1 under the same key.

A renewal is safe only where a further attempt cannot repeat an effect: the contract is
retry-safe (the destination deduplicates on the key), or its lookups are authoritative both
ways (`presence_and_absence`) and the destination says, when asked at the request and again
at the grant, that the effect is absent. Anything else is `unsafe_retry`: an admin resolves it.
"""

from __future__ import annotations

import hmac
import json
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction

from dispatch.failpoints import failpoint
from dispatch.models import ApprovalRequest, Operation, Principal, Renewal, RenewalVote
from dispatch.queue import execute_on_commit
from dispatch.runtime import get_runtime
from dispatch.services.access import access_operation_for_page
from dispatch.services.admission import admit, deployment_refusal, validate_arguments
from dispatch.services.attempts import delivery_fence, delivery_fenced
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.services.lookups import lookup_bounded, lookup_record
from dispatch.services.operations import operation_move
from dispatch.services.voters import counting_voters, require_counting_voter
from protocols.contracts import OperationContract, Reconciliation
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    RENEWAL_LIFECYCLE,
    ApprovalEvent,
    ApprovalState,
    OperationEvent,
    OperationState,
    sources,
    transition,
)
from protocols.roles import Role

#: How long a renewal waits for its decision when the contract names no approval window.
DEFAULT_WINDOW = timedelta(hours=1)


def operation_reauthorize(
    *, actor: Principal, operation_id: object, now: datetime, reason: object = "",
) -> Renewal:
    """Ask for a renewed approval of attempt N+1 of an `unknown` operation: by an admin of
    its tenant, or by the principal it runs for. The request itself changes no operation."""
    operation = access_operation_for_page(actor, operation_id)
    if actor.id != operation.principal_id:
        require_role(actor, Role.ADMIN)  # as operation_resolve: the tenant sees the operation
    if not isinstance(reason, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/reason", "message": "must be a string"}])
    waiting = _pending(operation)
    if waiting is not None and now >= waiting.expires_at:
        _expire(waiting, now)  # its window passed unanswered: another may be asked
    elif waiting is not None:  # before asking the destination anything
        raise _already_pending(operation)
    contract = _renewable(operation, now)
    window = (contract.approval_requirement.expires_in if contract.approval_requirement
              else int(DEFAULT_WINDOW.total_seconds()))
    try:
        with transaction.atomic():
            renewal = Renewal.objects.create(
                tenant_id=operation.tenant_id, operation=operation,
                attempt=operation.attempts_made + 1, digest=operation.proposal.digest,
                requested_by=actor, reason=reason, state=RENEWAL_LIFECYCLE.initial,
                quorum=_approval_quorum(operation),
                created_at=now, expires_at=now + timedelta(seconds=window))
            audit_record(tenant_id=operation.tenant_id, kind="renewal.requested",
                         actor=actor.name, at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id, digest=renewal.digest,
                         details={"renewal_id": renewal.id, "attempt": renewal.attempt})
    except IntegrityError:
        raise _already_pending(operation) from None
    return renewal


def _approval_quorum(operation: Operation) -> int:
    """The quorum the operation's approval needed: its renewal needs the same."""
    quorum = ApprovalRequest.objects.filter(proposal_id=operation.proposal_id).values_list(
        "quorum", flat=True).first()
    return quorum or 1


def _expire(renewal: Renewal, now: datetime) -> None:
    with transaction.atomic():
        renewal_move(renewal, ApprovalEvent.EXPIRE, now=now, actor="system")


def _pending(operation: Operation) -> Renewal | None:
    return Renewal.objects.filter(operation_id=operation.id,
                                  state=ApprovalState.PENDING).first()


def _already_pending(operation: Operation) -> Denial:
    return Denial(DenialCode.APPROVAL_PENDING, "A renewal of this attempt was already "
                  "requested; it waits for its decision.", operation_id=operation.id)


def renewal_decide(
    *, approver: Principal, renewal_id: object, decision: object, digest: object,
    now: datetime, reason: object = "",
) -> Renewal:
    """Grant or deny a pending renewal. A human of the role the contract's approval names (an
    operator where it names none) decides who neither asked for it nor is the operation's
    principal, confirming the digest shown; a grant re-checks what a
    dispatch would (authority, the deployment, the destination's absence where that is what
    makes it safe) and moves the operation back to `claimed` for its worker. A grant is a vote:
    the renewal needs the quorum the operation's approval needed, and the vote that completes
    it counts every earlier one again (docs/design.md#approval-policies)."""
    require_role(approver, Role.OPERATOR)
    if not isinstance(renewal_id, str):
        raise Denial(DenialCode.NOT_FOUND, kind="renewal")
    renewal = Renewal.objects.select_related(
        "operation", "operation__proposal", "operation__principal").filter(
        id=renewal_id, tenant_id=approver.tenant_id).first()
    if renewal is None:
        raise Denial(DenialCode.NOT_FOUND, kind="renewal", id=renewal_id)
    operation = renewal.operation
    refusal = renewal_decider_refusal(approver, renewal)
    if refusal is not None:
        raise refusal
    require_counting_voter(approver, _deciding_role(operation))
    if decision not in ("grant", "deny"):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/decision", "message": "must be 'grant' or 'deny'"}])
    if not isinstance(reason, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/reason", "message": "must be a string"}])
    if not isinstance(digest, str) or not hmac.compare_digest(digest.encode(),
                                                              renewal.digest.encode()):
        raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="digest differs from the proposal's")
    if renewal.state != ApprovalState.PENDING:
        raise Denial(DenialCode.APPROVAL_DECIDED, state=renewal.state)
    if now >= renewal.expires_at:
        _expire(renewal, now)
        raise Denial(DenialCode.APPROVAL_EXPIRED)
    if decision == "deny":
        with transaction.atomic():
            if not renewal_move(renewal, ApprovalEvent.DENY, now=now, actor=approver.name,
                                approver=approver, reason=reason):
                raise Denial(DenialCode.APPROVAL_DECIDED)
        return renewal
    contract = _renewable(operation, now)
    failpoint("renewal.before_transaction")
    with transaction.atomic():
        # Authority as a dispatch would see it, share-locked: a revocation that committed
        # first refuses the grant; one that comes later waits for this commit.
        admit(contract, operation.principal,
              validate_arguments(contract, operation.proposal.arguments), now=now,
              expect_digest=operation.proposal.digest, lock=True)
        if not _vote(renewal, approver, now):
            return renewal  # a vote toward the quorum: still pending
        # Where no dedup made it safe, the destination's authoritative absence past the fence
        # did (`_renewable`).
        if not renewal_move(renewal, ApprovalEvent.GRANT, now=now, actor=approver.name,
                            approver=approver, reason=reason,
                            absence_proven=not contract.retry_safe):
            raise Denial(DenialCode.APPROVAL_DECIDED)
        execute_on_commit(operation.id)
    return renewal


def _vote(renewal: Renewal, approver: Principal, now: datetime) -> bool:
    """Record `approver`'s grant of `renewal`, inside the deciding transaction; whether it
    completes the quorum. Where it does not, the vote is audited and the renewal stays
    pending."""
    if renewal.quorum <= 1:
        return True  # a single approver's grant decides: no vote to count
    # One decider at a time per renewal (SQLite holds the write lock since BEGIN IMMEDIATE):
    # of two votes completing the quorum the second counts the first.
    if not Renewal.objects.select_for_update().filter(
            id=renewal.id, state=ApprovalState.PENDING).exists():
        raise Denial(DenialCode.APPROVAL_DECIDED)
    try:
        with transaction.atomic():
            RenewalVote.objects.create(renewal=renewal, approver=approver, voted_at=now)
    except IntegrityError:
        raise Denial(DenialCode.APPROVAL_DECIDED, reason="already voted") from None
    granted = RenewalVote.objects.filter(counting_voters(_deciding_role(renewal.operation)),
                                         renewal_id=renewal.id).count()
    if granted >= renewal.quorum:
        return True
    audit_record(tenant_id=renewal.tenant_id, kind="renewal.voted", actor=approver.name,
                 at=now, operation_id=renewal.operation_id,
                 proposal_id=renewal.operation.proposal_id, digest=renewal.digest,
                 details={"renewal_id": renewal.id, "votes": granted,
                          "quorum": renewal.quorum})
    return False


def renewal_decider_refusal(approver: Principal, renewal: Renewal) -> Denial | None:
    """Why `approver` may not decide `renewal`, or None: a human of the role the contract's
    approval names (an admin holds every role), who neither asked for it nor is the
    operation's principal. The decision, the queue and the renewal's page ask the same."""
    operation = renewal.operation
    try:
        require_role(approver, _deciding_role(operation))
    except Denial as denial:
        return denial
    if approver.id in (renewal.requested_by_id, operation.principal_id):
        return Denial(DenialCode.APPROVER_IS_REQUESTER)
    return None


def renewal_deciding_role(renewal: Renewal) -> str:
    """The role that decides `renewal` (its contract's approval role)."""
    return _deciding_role(renewal.operation)


def _deciding_role(operation: Operation) -> str:
    """The role the contract's approval requirement names (an operator's where it names none,
    or the contract is no longer registered: the grant then refuses it as a mismatch)."""
    contract = get_runtime().registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None or contract.approval_requirement is None:
        return Role.OPERATOR
    return contract.approval_requirement.role


def renewal_refusal(operation: Operation, now: datetime) -> Denial | None:
    """Why this operation cannot be renewed now, or None: for pages that offer the button."""
    try:
        _renewable(operation, now, ask_destination=False)
    except Denial as denial:
        return denial
    return None


def _renewable(
    operation: Operation, now: datetime, *, ask_destination: bool = True,
) -> OperationContract:
    """The one place that decides whether a further attempt may be authorized (module doc)."""
    if operation.state != OperationState.UNKNOWN:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "Only an operation whose outcome is "
                     "unknown can be renewed.", state=operation.state)
    if operation.proposal.cancelled_at is not None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The action was cancelled; a "
                     "cancelled action is never attempted again: resolve it.",
                     state=operation.state)
    runtime = get_runtime()
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None:
        raise Denial(DenialCode.CONTRACT_MISMATCH, operation=operation.operation,
                     reason="the contract is no longer registered")
    moved = deployment_refusal(runtime, contract, operation.proposal)
    if moved is not None:
        raise moved
    if contract.retry_safe:
        return contract  # the destination deduplicates on the key: a repeat is one effect
    if contract.reconciliation is not Reconciliation.PRESENCE_AND_ABSENCE:
        raise Denial(DenialCode.UNSAFE_RETRY, operation_id=operation.id,
                     reason="the destination does not deduplicate and its lookups cannot "
                            "prove the effect absent")
    # An absence proves nothing while the last request may still be on its way: a worker
    # presumed lost, or a call abandoned at the contract timeout, may yet deliver it. Only
    # once the fence has passed since that attempt started is an absence taken as final.
    if not delivery_fenced(operation, contract, now):
        fence = delivery_fence(contract)
        raise Denial(DenialCode.UNSAFE_RETRY, operation_id=operation.id,
                     reason=f"attempt {operation.attempts_made} may still be delivered; ask "
                            f"again {fence.total_seconds():g}s after it started")
    if ask_destination:
        found = lookup_bounded(runtime.handler(contract), operation.id,
                               json.loads(operation.proposal.canonical))
        lookup_record(operation, found, now)
        if found.found != "absent":
            raise Denial(DenialCode.UNSAFE_RETRY, operation_id=operation.id,
                         reason=f"the destination does not say the effect is absent: "
                                f"{found.evidence}")
    return contract


def renewals_withdraw(operation: Operation, *, now: datetime, actor: str, resolved: str) -> int:
    """Withdraw the operation's pending renewal, if any, inside the caller's transaction (an
    admin's resolution: a settled operation is never attempted again). A renewal decided
    meanwhile is left as decided. How many were withdrawn."""
    withdrawn = 0
    for renewal in Renewal.objects.select_related("operation").filter(
            operation_id=operation.id, state=ApprovalState.PENDING):
        withdrawn += renewal_move(renewal, ApprovalEvent.REVOKE, now=now, actor=actor,
                                  details={"resolved": resolved})
    return withdrawn



def renewal_move(
    renewal: Renewal, event: ApprovalEvent, *, now: datetime, actor: str,
    approver: Principal | None = None, reason: str = "", absence_proven: bool = False,
    details: dict[str, str] | None = None,
) -> bool:
    """THE one owner of `Renewal.state`: move `renewal` by `event`, by `RENEWAL_LIFECYCLE`,
    and write its audit event, inside the caller's transaction.

    One conditional UPDATE from the states the table allows `event` from (pending): of two
    deciders exactly one moves it; False for the other (nothing written). A decision records
    its `approver` and `reason`. A grant also moves the operation back to `claimed` for
    attempt `renewal.attempt` (`operation_move`, `retry`; `absence_proven` as the grant found
    it), and raises `protocol_state_invalid` if the operation moved on since the request,
    which rolls the caller's transaction back whole. The caller's `renewal` is updated."""
    allowed = sources(RENEWAL_LIFECYCLE, event)
    (target,) = {transition(RENEWAL_LIFECYCLE, source, event) for source in allowed}
    fields: dict[str, object] = {"state": target, "decided_at": now}
    if approver is not None:
        fields.update(approver=approver, decision_reason=reason)
    moved = Renewal.objects.filter(id=renewal.id, state__in=allowed).update(**fields)
    if moved != 1:
        return False
    renewal.state, renewal.decided_at = target, now
    if approver is not None:
        renewal.approver, renewal.decision_reason = approver, reason
    operation = renewal.operation
    # The operation must still be where the request found it: unknown, attempt N done.
    if event is ApprovalEvent.GRANT and not operation_move(
            operation, OperationEvent.RETRY, attempt=renewal.attempt - 1, now=now, actor=actor,
            evidence=f"renewed approval {renewal.id} for attempt {renewal.attempt}",
            details={"renewal_id": renewal.id}, absence_proven=absence_proven):
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The operation moved on since "
                     "the renewal was requested.", state=operation.state)
    audit_record(tenant_id=renewal.tenant_id, actor=actor, at=now,
                 # The kind of each move (`protocols.trace` replays them).
                 kind={ApprovalEvent.GRANT: "renewal.granted", ApprovalEvent.DENY:
                       "renewal.denied", ApprovalEvent.EXPIRE: "renewal.expired",
                       ApprovalEvent.REVOKE: "renewal.withdrawn"}[event],
                 operation_id=renewal.operation_id, proposal_id=operation.proposal_id,
                 digest=renewal.digest,
                 details={"renewal_id": renewal.id, "attempt": renewal.attempt,
                          **(details or {})})
    return True
