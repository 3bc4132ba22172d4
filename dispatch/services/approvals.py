"""The approval resolver (docs/design.md#approvals): the only place that decides approvals and mints
permits.

Only an authenticated human holding the required role, of the same tenant, who confirms the
digest they were shown, before expiry, may decide, and only once.
"""

from __future__ import annotations

import hmac
import json
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q

from dispatch.failpoints import failpoint
from dispatch.ids import new_id
from dispatch.models import ApprovalRequest, Decision, Permit, Principal, Proposal, Vote
from dispatch.observability.tracing import note, traced
from dispatch.queue import run_on_commit
from dispatch.runtime import get_runtime
from dispatch.services.access import access_approval_for_decision
from dispatch.services.admission import (
    Admission,
    admit,
    links_moved,
    validate_arguments,
)
from dispatch.services.audit import audit_record, audit_text
from dispatch.services.authority import require_role
from dispatch.services.notifications import notify_approval_decided, notify_approval_requested
from dispatch.services.permits import permit_move
from dispatch.services.resources import moved_refs, resource_move, resources_release
from dispatch.services.voters import counting_voters, require_counting_voter
from dispatch.services.wakeups import wake_on_decision
from dispatch.store import approvals as store
from dispatch.store.sql import insert, pipelined
from protocols.audit_kinds import audit_moves
from protocols.denials import Denial, DenialCode
from protocols.grants import Grant as CoreGrant
from protocols.grants import scope_as_json
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    PERMIT_LIFECYCLE,
    ApprovalEvent,
    ApprovalState,
    PermitEvent,
    PermitState,
    ResourceEvent,
    sources,
    transition,
)


@traced("approval.decide")
def approval_decide(
    *,
    approver: Principal,
    approval_id: object,
    decision: object,
    digest: object,
    reason: object = "",
    now: datetime,
) -> tuple[ApprovalRequest, Permit | None]:
    """Vote on one pending approval: a denial denies it; the grant that completes its quorum
    (docs/design.md#approval-policies) grants it and mints the one-shot permit."""
    approval = access_approval_for_decision(approver, approval_id)
    note(approval_id=approval.id, proposal_id=approval.proposal_id,
         decision=str(decision) if decision in (Decision.Outcome.GRANT, Decision.Outcome.DENY)
         else None)
    require_role(approver, approval.role)
    require_counting_voter(approver, approval.role)
    if approver.id == approval.proposal.principal_id:
        raise Denial(DenialCode.APPROVER_IS_REQUESTER)  # four eyes: never one's own request
    if not isinstance(decision, str) or decision not in (Decision.Outcome.GRANT,
                                                           Decision.Outcome.DENY):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/decision", "message": "must be 'grant' or 'deny'"}])
    if not isinstance(reason, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/reason", "message": "must be a string"}])
    if not isinstance(digest, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/digest", "message": "must be the digest shown with the proposal"}])
    proposal = approval.proposal
    # The approver confirms the exact bytes they were shown.
    if not hmac.compare_digest(digest.encode(), proposal.digest.encode()):
        raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="digest differs from the proposal's")
    if approval.state != ApprovalState.PENDING:
        raise _not_pending(approval.id, approval.state)
    if now >= approval.expires_at:
        approval_expire(approval_id=approval.id, now=now)  # this one only, not a sweep
        raise Denial(DenialCode.APPROVAL_EXPIRED)
    event = ApprovalEvent.GRANT if decision == Decision.Outcome.GRANT else ApprovalEvent.DENY
    failpoint("decision.before_transaction")
    try:
        with transaction.atomic(durable=True), pipelined():
            # One decider at a time per approval: the request's row is locked (SQLite holds
            # the write lock since BEGIN IMMEDIATE), so that of two votes completing a quorum
            # the second counts the first, and exactly one mints the permit.
            locked = store.lock(id=approval.id)
            if locked != ApprovalState.PENDING:
                raise _not_pending(approval.id, locked)
            # The permit records the grant the requester's authority rests on
            # (docs/design.md#permits), checked in this transaction, share-locked: a revocation that
            # committed first refuses the grant, and one that comes later finds the permit and
            # revokes it.
            grant = _admit_for_grant(proposal, now).grant if event is ApprovalEvent.GRANT \
                else None
            insert(Vote(approval_id=approval.id, approver=approver, outcome=decision,
                        digest=digest, voted_at=now))
            failpoint("decision.vote_recorded")
            # Counted only where a quorum needs more than this one grant: a single approver's
            # decision costs no read of the votes. Every earlier vote is read again here, under
            # the lock: one whose voter was deactivated or demoted since no longer counts.
            granted = approval.quorum if grant is None or approval.quorum == 1 else \
                Vote.objects.filter(counting_voters(approval.role), approval_id=approval.id,
                                    outcome=Decision.Outcome.GRANT).count()
            if granted < approval.quorum:
                # A vote toward the quorum: the request stays pending, no permit yet.
                audit_record(tenant_id=proposal.tenant_id, kind="approval.voted",
                             actor=approver.name, at=now, proposal_id=proposal.id,
                             digest=proposal.digest,
                             details={"approval_id": approval.id, "votes": granted,
                                      "quorum": approval.quorum})
                return approval, None
            # The completing grant, or any denial, decides; only a pending request before its
            # expiry moves.
            if not approval_move(approval, event, now=now, actor=approver.name,
                                 approver=approver, grant=grant, reason=reason):
                raise Denial(DenialCode.APPROVAL_DECIDED)
            insert(Decision(approval_id=approval.id, approver=approver, outcome=decision,
                            digest=digest, reason=reason, decided_at=now))
            wake_on_decision(approval.id, execution_id=proposal.execution_id)  # after commit
            permit = approval.permit if grant is not None else None
            if permit is not None and proposal.dispatch_on_approval:
                # The worker claims, with every re-check of a dispatch, in one transaction
                # with attempt 1 (docs/design.md#write-transactions); handed over on commit.
                run_on_commit(proposal.id, proposal.principal_id)
    except IntegrityError:
        # One vote per approver, one decision per approval: this human voted already.
        raise Denial(DenialCode.APPROVAL_DECIDED, reason="already voted") from None
    return approval, permit


def _not_pending(approval_id: str, state: str | None) -> Denial:
    """Why an approval that is no longer pending takes no decision: nobody decided it before
    the expiry sweep (`approval_expired`) or a cancellation withdrew it (`approval_revoked`,
    docs/design.md#denials); otherwise it was decided, and this is a second decision."""
    undecided = not Decision.objects.filter(approval_id=approval_id).exists()
    if undecided and state == ApprovalState.EXPIRED:
        return Denial(DenialCode.APPROVAL_EXPIRED)
    if undecided and state == ApprovalState.REVOKED:
        return Denial(DenialCode.APPROVAL_REVOKED)
    return Denial(DenialCode.APPROVAL_DECIDED, state=state)


def _admit_for_grant(proposal: Proposal, now: datetime) -> Admission:
    """No human is asked to approve what could never run under the current contract: the
    action is admitted again for its requester (a tightened deployment policy answers as
    policy, `effect_not_permitted`; a changed destination is the dispatcher's to refuse; a
    linked resource edited since the proposal, a report's question, is `stale_revision`)."""
    contract = get_runtime().contract_for(proposal.operation, proposal.contract_fingerprint)
    if contract.fingerprint != proposal.contract_fingerprint:
        raise Denial(DenialCode.CONTRACT_MISMATCH, operation=proposal.operation)
    admission = admit(contract, proposal.principal,
                      validate_arguments(contract, proposal.arguments), now=now, lock=True)
    if any(isinstance(v, dict) and "links" in v for v in admission.resolved.arguments.values()):
        moved = links_moved(admission.resolved.arguments,
                            json.loads(proposal.canonical)["arguments"])
        if moved is not None:
            raise moved
    return admission


def _permit_mint(
    approval: ApprovalRequest, proposal: Proposal, approver: Principal, grant: CoreGrant,
    now: datetime,
) -> Permit:
    """The one-shot permit, binding everything of docs/design.md#permits, in the grant's
    transaction."""
    return insert(Permit(
        tenant_id=proposal.tenant_id, approval_id=approval.id, proposal=proposal,
        state=PERMIT_LIFECYCLE.initial, approver=approver,
        requester_id=proposal.principal_id, execution_id=proposal.execution_id,
        grant_id=grant.id, grant_scope=scope_as_json(grant.scope),
        operation=proposal.operation,
        contract_fingerprint=proposal.contract_fingerprint, digest=proposal.digest,
        resource_refs=proposal.resource_refs,
        destination_fingerprint=proposal.destination_fingerprint,
        policy_fingerprint=proposal.policy_fingerprint,
        operation_id=new_id("op"), issued_at=now, expires_at=approval.expires_at,
    ))


def approval_open(
    *, proposal: Proposal, role: str, quorum: int = 1, expires_at: datetime, actor: str,
    now: datetime,
) -> ApprovalRequest:
    """Inside the proposal's transaction: the pending request for `quorum` humans holding
    `role`, audited, and its notifications written to the outbox."""
    approval = insert(ApprovalRequest(
        tenant_id=proposal.tenant_id, proposal=proposal, role=role, quorum=quorum,
        state=APPROVAL_LIFECYCLE.initial, created_at=now, expires_at=expires_at))
    audit_record(tenant_id=proposal.tenant_id, kind="approval.requested", actor=actor, at=now,
                 proposal_id=proposal.id, digest=proposal.digest,
                 details={"approval_id": approval.id, "role": role,
                          **({"quorum": quorum} if quorum != 1 else {}),
                          "expires_at": expires_at.isoformat()})
    # The approvers' notifications, in this transaction (docs/design.md#notifications).
    notify_approval_requested(approval, proposal, now)
    return approval


def approval_move(
    approval: ApprovalRequest, event: ApprovalEvent, *, now: datetime, actor: str,
    approver: Principal | None = None, grant: CoreGrant | None = None, reason: str = "",
    within: str | None = None,
) -> bool:
    """THE one owner of an approval request's state: move `approval` by `event`, from the
    state it was loaded in (the table must allow `event` from it), with what the move does
    and its audit event, inside the caller's transaction. Returns whether it moved; the
    caller's `approval` is updated when it did (and, on a grant, holds its new `permit`).

    One conditional UPDATE: of two deciders, exactly one finds the request pending, before its
    expiry. A grant (by `approver`, resting on `grant`) moves the proposal's resources and
    mints the one-shot permit; a denial releases the resources; an expiry expires a granted
    request's permit first (a permit claimed meanwhile has run: the request stays granted,
    False) and releases the resources; each writes `approval.<granted|denied|expired>`. A
    revocation revokes the issued permit too; `within` names the event that records it (a
    cancelled proposal's `proposal.cancelled`, which releases the resources itself). A grant,
    a denial and an expiry write the requesting agent's notifications in the same move.
    """
    source = ApprovalState(approval.state)
    target = transition(APPROVAL_LIFECYCLE, source, event)
    if event is ApprovalEvent.REVOKE and within is None:
        raise ValueError("a revocation is recorded by the event it is part of")
    if event is ApprovalEvent.GRANT and (grant is None or approver is None):
        raise ValueError("a grant names its approver and the grant it rests on")
    if source is ApprovalState.GRANTED and event is not ApprovalEvent.GRANT:
        permit = Permit.objects.filter(approval_id=approval.id).first()
        moved = permit is not None and permit_move(
            permit, PermitEvent.EXPIRE if event is ApprovalEvent.EXPIRE else PermitEvent.REVOKE,
            now=now, actor=actor, within=within or "approval.expired")
        if event is ApprovalEvent.EXPIRE and not moved:
            return False  # claimed (it ran) or revoked with its grant: it stays granted
    # Decisions before expiry only; an expiry only past it; a revocation whenever.
    decision = event in (ApprovalEvent.GRANT, ApprovalEvent.DENY)
    if not store.move(id=approval.id, source=source, target=target, now=now,
                      before_expiry=event is not ApprovalEvent.EXPIRE,
                      after_expiry=not decision):
        return False
    approval.state = target
    if within is not None:
        return True
    proposal = approval.proposal
    permit, granted = None, []
    if event is ApprovalEvent.GRANT and grant is not None and approver is not None:
        granted = moved_refs(proposal.resource_refs)
        for ref in granted:
            resource_move(ref, ResourceEvent.GRANT, now=now)
        permit = _permit_mint(approval, proposal, approver, grant, now)
        approval.permit = permit
    else:
        resources_release(proposal=proposal, actor=actor, now=now, event=(
            ResourceEvent.DENY if event is ApprovalEvent.DENY else ResourceEvent.EXPIRE))
    notify_approval_decided(approval, proposal, now)  # the agent's webhooks, in this move
    if event is ApprovalEvent.EXPIRE:
        audit_record(tenant_id=approval.tenant_id, kind="approval.expired", actor=actor,
                     at=now, proposal_id=proposal.id, details={"approval_id": approval.id})
        return True
    audit_record(
        tenant_id=proposal.tenant_id,
        kind="approval.granted" if permit else "approval.denied",
        actor=actor, at=now, proposal_id=proposal.id, digest=proposal.digest,
        # What the operator wrote stays in the decision; the audit masks any value of the
        # action it quotes, as it does a handler's error.
        details={"approval_id": approval.id, "reason": audit_text(proposal, reason),
                 "permit_id": permit.id if permit else None,
                 **audit_moves(granted, ResourceEvent.GRANT)},
    )
    return True


def approvals_expire_stale(*, now: datetime) -> int:
    """Expire pending approvals and issued permits past their window; idempotent."""
    stale = ApprovalRequest.objects.filter(
        Q(state=ApprovalState.PENDING) | Q(state=ApprovalState.GRANTED,
                                           permit__state=PermitState.ISSUED),
        expires_at__lte=now,
    ).values_list("id", flat=True)[:500]
    return sum(approval_expire(approval_id=approval_id, now=now) for approval_id in stale)


def approval_expire(*, approval_id: str, now: datetime) -> bool:
    """Expire one approval past its window (and its unclaimed permit); False if it moved on."""
    with transaction.atomic():
        approval = ApprovalRequest.objects.select_related("proposal").filter(
            id=approval_id, expires_at__lte=now).first()
        if approval is None:
            return False
        if ApprovalState(approval.state) not in sources(APPROVAL_LIFECYCLE,
                                                        ApprovalEvent.EXPIRE):
            return False
        return approval_move(approval, ApprovalEvent.EXPIRE, now=now, actor="system")
