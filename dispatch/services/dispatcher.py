"""The enforcing dispatcher (DESIGN §5, spec §7), steps 1-7, in order, in the caller's request.

`proposal_dispatch` checks everything again and claims; `dispatch.services.execution` runs
steps 8-9 on a worker. Every refusal is a `Denial` with its stable code; nothing runs without a
committed claim.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction

from dispatch.claims import operation_claim
from dispatch.failpoints import failpoint
from dispatch.ids import new_id
from dispatch.models import Operation, Permit, Principal, Proposal
from dispatch.runtime import get_runtime
from dispatch.services.access import access_proposal_for_dispatch
from dispatch.services.audit import audit_record
from dispatch.services.budgets import budget_keys
from dispatch.services.proposals import (
    check_authority,
    resolve_resources,
    snapshot_of,
    validate_arguments,
)
from protocols.canonical import digest
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    ApprovalState,
    PermitState,
)

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


# --- steps 1-7: in the request ------------------------------------------------------------------


def proposal_dispatch(
    *,
    principal: Principal,
    proposal_id: object,
    permit_id: object = None,
    now: datetime,
    enqueue: bool = True,
) -> Operation:
    """Check everything again, then take the budget and claim; the handler runs on a worker.

    Every refusal is audited as `dispatch.denied` with its code, then raised.
    """
    try:
        return _dispatch(principal=principal, proposal_id=proposal_id, permit_id=permit_id,
                         now=now, enqueue=enqueue)
    except Denial as denial:
        with transaction.atomic():
            audit_record(tenant_id=principal.tenant_id, kind="dispatch.denied",
                         actor=principal.name, at=now,
                         proposal_id=_id_or_blank(proposal_id),
                         details={"code": denial.code.value, **denial.details})
        raise


def _id_or_blank(value: object) -> str:
    """A caller-supplied id fit for the audit's id column; anything else is left out."""
    return value if isinstance(value, str) and len(value) <= 40 else ""


def _dispatch(
    *, principal: Principal, proposal_id: object, permit_id: object, now: datetime,
    enqueue: bool,
) -> Operation:
    runtime = get_runtime()
    proposal = access_proposal_for_dispatch(principal, proposal_id)
    # The permit binds the requesting principal: nobody else dispatches this proposal.
    if proposal.principal_id != principal.id:
        raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="proposed by another principal")
    if proposal.cancelled_at is not None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, "The proposal was cancelled.")
    # A claimed permit is final, whatever else has changed since: a duplicate or losing
    # dispatch hears so at once, without the re-checks below (which a winner still runs).
    own = _related(proposal, "permit")
    if own is not None and own.state == PermitState.CLAIMED and permit_id in (None, own.id):
        raise Denial(DenialCode.PERMIT_CLAIMED, permit_id=own.id)

    # 1. Resolve the contract; verify registration fingerprints.
    contract = runtime.contract(proposal.operation)
    if contract.fingerprint != proposal.contract_fingerprint:
        raise Denial(DenialCode.CONTRACT_MISMATCH, operation=contract.qualified_name)
    runtime.handler(contract)
    if runtime.policy_fingerprint(contract) != proposal.policy_fingerprint:
        raise Denial(DenialCode.CONTRACT_MISMATCH, reason="deployment policy changed")
    if runtime.destination_fingerprint(contract) != proposal.destination_fingerprint:
        raise Denial(DenialCode.CONTRACT_MISMATCH, reason="destination changed")

    # 2. Validate arguments; resolve resource handles through the store.
    arguments = validate_arguments(contract, proposal.arguments)
    resolved = resolve_resources(contract, principal, arguments, event=None)
    snapshot_digest = digest(snapshot_of(runtime, contract, resolved.arguments))
    if not hmac.compare_digest(snapshot_digest, proposal.digest):
        raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="the snapshot no longer matches")

    # 3-4. Tool set, grant scope, expiry, revocation, deployment policy and effect ceiling.
    def authority(*, lock: bool = False) -> object:
        return check_authority(runtime, contract, principal, resolved.arguments, now, lock=lock)

    authority()

    # 5. The approval, against the exact canonical proposal.
    # 4 (protocol state) is decided by the claim's compare-and-swap in step 7, after the
    # permit: so every loser of a race for one permit hears `permit_claimed`.
    permit = _permit_for(contract, proposal, own, principal, permit_id, now)

    # 6-7. Take the budget and claim, in one transaction: a failed claim holds no capacity.
    budget = budget_keys(principal_id=principal.id, execution_id=proposal.execution_id, now=now)
    cost = contract.scheduling_contract.budget_cost
    failpoint("dispatch.before_claim")
    operation = operation_claim(
        proposal=proposal, permit=permit,
        operation_id=permit.operation_id if permit else new_id("op"),
        actor=principal.name, now=now, budget=budget, cost=cost,
        recheck_authority=lambda: authority(lock=True),
    )
    if not transaction.get_connection().in_atomic_block:  # not inside a grant: committed
        failpoint("claim.after_commit")
    if enqueue:
        operation_enqueue(operation.id)
    return operation


def _permit_for(
    contract: OperationContract, proposal: Proposal, own: Permit | None, principal: Principal,
    permit_id: object, now: datetime,
) -> Permit | None:
    """The proposal's own permit (`own`, loaded with it), checked for this dispatch."""
    if not contract.requires_approval:
        if permit_id is not None:
            raise Denial(DenialCode.PROPOSAL_MISMATCH, reason="this operation takes no permit")
        return None
    # A permit named by the caller must be this proposal's own; copying another proposal's
    # permit id does not copy its authority, and a forged id names nothing.
    if permit_id is not None and (own is None or permit_id != own.id):
        other = Permit.objects.filter(id=permit_id, tenant_id=principal.tenant_id).exists()
        raise Denial(DenialCode.PROPOSAL_MISMATCH if other else DenialCode.NOT_FOUND,
                     kind="permit", id=str(permit_id))
    approval = _related(proposal, "approval")  # loaded with the proposal
    if approval is None:
        raise Denial(DenialCode.APPROVAL_REQUIRED)
    state = ApprovalState(approval.state)
    if state is ApprovalState.PENDING:
        raise Denial(DenialCode.APPROVAL_EXPIRED if now >= approval.expires_at
                     else DenialCode.APPROVAL_PENDING)
    if state is ApprovalState.DENIED:
        raise Denial(DenialCode.APPROVAL_DENIED)
    if state is ApprovalState.EXPIRED:
        raise Denial(DenialCode.APPROVAL_EXPIRED)
    if state is ApprovalState.REVOKED:
        raise Denial(DenialCode.APPROVAL_REVOKED)
    permit = own
    if permit is None:  # a granted approval always minted one: a store inconsistency
        raise Denial(DenialCode.PERSISTENCE_FAILURE, reason="granted approval has no permit")
    if permit.state == PermitState.CLAIMED:
        raise Denial(DenialCode.PERMIT_CLAIMED, permit_id=permit.id)
    if permit.state == PermitState.REVOKED:
        raise Denial(DenialCode.APPROVAL_REVOKED)
    if permit.state == PermitState.EXPIRED or now >= permit.expires_at:
        raise Denial(DenialCode.APPROVAL_EXPIRED)
    _check_binding(permit, proposal)
    return permit


def _related(instance: Any, name: str) -> Any:
    """A reverse one-to-one loaded by select_related, or None where there is none."""
    try:
        return getattr(instance, name)
    except ObjectDoesNotExist:
        return None


def _check_binding(permit: Permit, proposal: Proposal) -> None:
    """Everything the permit binds must equal the proposal being dispatched (spec §6.1)."""
    if not hmac.compare_digest(permit.digest, proposal.digest):
        raise Denial(DenialCode.PROPOSAL_MISMATCH, field="digest")
    if permit.requester_id != proposal.principal_id:
        raise Denial(DenialCode.PROPOSAL_MISMATCH, field="requester")
    if permit.execution_id != proposal.execution_id:
        raise Denial(DenialCode.PROPOSAL_MISMATCH, field="execution_id")
    if permit.contract_fingerprint != proposal.contract_fingerprint:
        raise Denial(DenialCode.CONTRACT_MISMATCH, field="contract_fingerprint")
    if permit.destination_fingerprint != proposal.destination_fingerprint:
        raise Denial(DenialCode.PROPOSAL_MISMATCH, field="destination_fingerprint")
    if permit.policy_fingerprint != proposal.policy_fingerprint:
        raise Denial(DenialCode.PROPOSAL_MISMATCH, field="policy_fingerprint")


def operation_enqueue(operation_id: str) -> None:
    """Hand the operation to a worker once the claim has committed; pass the id only."""
    from dispatch.tasks import operation_execute_task

    transaction.on_commit(lambda: operation_execute_task.delay(operation_id))
