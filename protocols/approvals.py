"""The approval gate (docs/design.md#dispatcher step 5, docs/design.md#approvals): may this exact
proposal run on this permit?

Pure: the shell loads the approval request and the permit and passes what they say; the gate
answers with the one denial that says why not, or None. `effective_approval_state` is the one
definition of "a pending approval past its window counts as expired", for every page and API
that shows an approval before the expiry job has run.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime

from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState, PermitState


def effective_approval_state(
    state: ApprovalState | str, expires_at: datetime, now: datetime
) -> ApprovalState:
    """The state an approval is in now: a pending one whose window has passed is expired,
    whether or not the expiry job has recorded it yet."""
    current = ApprovalState(state)
    if current is ApprovalState.PENDING and now >= expires_at:
        return ApprovalState.EXPIRED
    return current


@dataclass(frozen=True)
class Binding:
    """What a permit binds and a proposal states (docs/design.md#permits), side by side for
    comparison."""

    digest: str
    requester: str
    execution_id: str
    contract_fingerprint: str
    destination_fingerprint: str
    policy_fingerprint: str


@dataclass(frozen=True)
class PermitView:
    id: str
    state: PermitState | str
    expires_at: datetime
    binding: Binding


_APPROVAL_DENIALS = {
    ApprovalState.PENDING: DenialCode.APPROVAL_PENDING,
    ApprovalState.DENIED: DenialCode.APPROVAL_DENIED,
    ApprovalState.EXPIRED: DenialCode.APPROVAL_EXPIRED,
    ApprovalState.REVOKED: DenialCode.APPROVAL_REVOKED,
}


def approval_refusal(state: ApprovalState) -> Denial | None:
    """The refusal of a dispatch under an approval in `state` (its effective state), or None for
    a granted one, whose permit decides (`permit_refusal`)."""
    code = _APPROVAL_DENIALS.get(state)
    return None if code is None else Denial(code)


def permit_refusal(
    *,
    approval_state: ApprovalState | str | None,
    approval_expires_at: datetime | None,
    permit: PermitView | None,
    proposal: Binding,
    now: datetime,
) -> Denial | None:
    """Why a proposal whose contract needs approval may not run on `permit` now, or None.

    In order: no approval request -> `approval_required`; the approval pending, denied,
    expired (or pending past its window) or revoked -> its code; a granted approval without a
    permit -> `persistence_failure` (a store inconsistency); the permit claimed ->
    `permit_claimed`, revoked -> `approval_revoked`, expired -> `approval_expired`; then every
    field the permit binds must equal the proposal's (one named field per refusal, digests
    compared in constant time).
    """
    if approval_state is None or approval_expires_at is None:
        return Denial(DenialCode.APPROVAL_REQUIRED)
    refusal = approval_refusal(effective_approval_state(approval_state, approval_expires_at,
                                                        now))
    if refusal is not None:
        return refusal
    if permit is None:
        return Denial(DenialCode.PERSISTENCE_FAILURE, reason="granted approval has no permit")
    if permit.state == PermitState.CLAIMED:
        return Denial(DenialCode.PERMIT_CLAIMED, permit_id=permit.id)
    if permit.state == PermitState.REVOKED:
        return Denial(DenialCode.APPROVAL_REVOKED)
    if permit.state == PermitState.EXPIRED or now >= permit.expires_at:
        return Denial(DenialCode.APPROVAL_EXPIRED)
    return binding_refusal(permit.binding, proposal)


def binding_refusal(permit: Binding, proposal: Binding) -> Denial | None:
    """Everything the permit binds must equal the proposal being dispatched
    (docs/design.md#permits)."""
    if not hmac.compare_digest(permit.digest, proposal.digest):
        return Denial(DenialCode.PROPOSAL_MISMATCH, field="digest")
    if permit.requester != proposal.requester:
        return Denial(DenialCode.PROPOSAL_MISMATCH, field="requester")
    if permit.execution_id != proposal.execution_id:
        return Denial(DenialCode.PROPOSAL_MISMATCH, field="execution_id")
    if permit.contract_fingerprint != proposal.contract_fingerprint:
        return Denial(DenialCode.CONTRACT_MISMATCH, field="contract_fingerprint")
    if permit.destination_fingerprint != proposal.destination_fingerprint:
        return Denial(DenialCode.PROPOSAL_MISMATCH, field="destination_fingerprint")
    if permit.policy_fingerprint != proposal.policy_fingerprint:
        return Denial(DenialCode.PROPOSAL_MISMATCH, field="policy_fingerprint")
    return None
