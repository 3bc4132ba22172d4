"""The enforcing dispatcher (docs/design.md#dispatcher), steps 1-7, in order, in the caller's
request.

`proposal_dispatch` checks everything again and claims; `dispatch.services.worker` runs
steps 8-9 on a worker. `proposal_claim_and_start` is the same claim, with attempt 1 started in
its transaction, for the process that runs the handler itself (docs/design.md#write-transactions:
two commits). Every refusal is a `Denial` with its stable code; nothing runs without a
committed claim.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction

from dispatch.failpoints import failpoint
from dispatch.ids import new_id
from dispatch.models import Operation, Permit, Principal, Proposal
from dispatch.observability.context import bind_ids
from dispatch.observability.tracing import span
from dispatch.queue import execute_on_commit
from dispatch.runtime import get_runtime
from dispatch.services.access import access_proposal_for_dispatch
from dispatch.services.admission import admit_proposal, deployment_refusal
from dispatch.services.audit import audit_record
from dispatch.services.budgets import attempt_budget
from dispatch.services.claims import operation_claim
from dispatch.services.operations import StartedAttempt, attempt_open
from protocols.approval_rules import cap_charges
from protocols.approvals import Binding, PermitView, permit_refusal
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import OperationState, PermitState

log = logging.getLogger(__name__)


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
    operation, _ = _audited(principal=principal, proposal_id=proposal_id, permit_id=permit_id,
                            now=now, enqueue=enqueue, start=False)
    return operation


def proposal_claim_and_start(
    *, principal: Principal, proposal_id: object, permit_id: object = None, now: datetime,
) -> tuple[Operation, StartedAttempt]:
    """The claim of `proposal_dispatch`, every re-check included, with attempt 1 started in
    the same transaction: for the process that runs the handler next (a worker given an
    approved `dispatch_on_approval` proposal, inline execution). A crash after this commit
    leaves an open attempt, which reconciliation settles as any other. Refusals as
    `proposal_dispatch`'s."""
    operation, started = _audited(principal=principal, proposal_id=proposal_id,
                                  permit_id=permit_id, now=now, enqueue=False, start=True)
    assert started is not None
    return operation, started


def _audited(
    *, principal: Principal, proposal_id: object, permit_id: object, now: datetime,
    enqueue: bool, start: bool,
) -> tuple[Operation, StartedAttempt | None]:
    # The decision to run (steps 1-7) and the claim, as one span of the action's trace; the
    # task it hands over on commit (`execute_on_commit`) is published inside it.
    bind_ids(proposal_id=_id_or_blank(proposal_id))  # the logs' and the caller's span
    with span("dispatch.claim", proposal_id=_id_or_blank(proposal_id)):
        try:
            operation, started = _dispatch(principal=principal, proposal_id=proposal_id,
                                           permit_id=permit_id, now=now, enqueue=enqueue,
                                           start=start)
        except Denial as denial:
            with transaction.atomic():
                audit_record(tenant_id=principal.tenant_id, kind="dispatch.denied",
                             actor=principal.name, at=now,
                             proposal_id=_id_or_blank(proposal_id),
                             details={"code": denial.code.value, **_without_values(denial)})
            log.info("dispatch denied: %s", denial.code.value)
            raise
        bind_ids(operation_id=operation.id)
        log.info("claimed")
        return operation, started


#: Details of a denial that quote an argument: the caller hears them, the audit does not
#: keep them (docs/design.md#audit: the audit holds references, never payloads).
_VALUE_DETAILS = frozenset({"value", "errors"})


def _without_values(denial: Denial) -> dict[str, object]:
    return {k: v for k, v in denial.details.items() if k not in _VALUE_DETAILS}


def _id_or_blank(value: object) -> str:
    """A caller-supplied id fit for the audit's id column; anything else is left out."""
    return value if isinstance(value, str) and len(value) <= 40 else ""


def _dispatch(
    *, principal: Principal, proposal_id: object, permit_id: object, now: datetime,
    enqueue: bool, start: bool,
) -> tuple[Operation, StartedAttempt | None]:
    failpoint("dispatch.before_claim")
    try:
        operation, started = _claim_in_one_transaction(
            principal=principal, proposal_id=proposal_id, permit_id=permit_id, now=now,
            start=start)
    except Denial as denial:
        raise _said_plainly(denial, proposal_id) from None
    if enqueue:
        execute_on_commit(operation.id)
    return operation, started


def _claim_in_one_transaction(
    *, principal: Principal, proposal_id: object, permit_id: object, now: datetime,
    start: bool,
) -> tuple[Operation, StartedAttempt | None]:
    # Every check and the claim share ONE transaction (docs/design.md#dispatcher steps 1-7): what is
    # checked is what is claimed. The grants are share-locked where they are read, so a revocation
    # that committed first is seen and a later one waits for the commit; on SQLite the
    # transaction holds the write lock from its first statement.
    with transaction.atomic():
        operation = _check_and_claim(principal=principal, proposal_id=proposal_id,
                                     permit_id=permit_id, now=now)
        # Attempt 1 in the claim's own transaction, where this process runs the handler next:
        # the claim checked everything (a pause included) under the same locks.
        started = attempt_open(operation, 1, now, details={"attempt": 1}) if start else None
        if start and started is None:
            raise RuntimeError(f"attempt 1 of the fresh claim {operation.id} did not start")
    if not transaction.get_connection().in_atomic_block:  # not inside a grant: committed
        failpoint("claim.after_commit")
    return operation, started


def _said_plainly(denial: Denial, proposal_id: object) -> Denial:
    """A dispatch of an action already claimed hears `permit_claimed`, unless its effect is
    uncertain: then `unsafe_retry`, which says an admin must resolve it (docs/design.md#audit). Read
    after the claim's transaction rolled back, on the refusal path only."""
    if denial.code is not DenialCode.PERMIT_CLAIMED:
        return denial
    found = Operation.objects.filter(proposal_id=proposal_id).values_list("id", "state").first()
    if found is not None and found[1] == OperationState.UNKNOWN:
        return Denial(DenialCode.UNSAFE_RETRY, operation_id=found[0], state=found[1])
    return denial


def _check_and_claim(
    *, principal: Principal, proposal_id: object, permit_id: object, now: datetime,
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
    contract = runtime.contract_for(proposal.operation, proposal.contract_fingerprint)
    moved = deployment_refusal(runtime, contract, proposal)
    if moved is not None:
        raise moved

    # 2-4. Arguments, resource handles through the store, tool set, grant scope, expiry,
    # revocation, deployment policy and effect ceiling; the snapshot must be the proposal's.
    # (4, the protocol state, is decided by the claim's compare-and-swap in step 7, after the
    # permit: so every loser of a race for one permit hears `permit_claimed`.)
    # The stored snapshot is trusted where its digest and the fingerprints are unchanged
    # (docs/design.md#dispatcher); resources and authority are checked every time.
    admission = admit_proposal(contract, principal, proposal, now=now, lock=True)

    # 5. The approval, against the exact canonical proposal.
    permit = _permit_for(contract, proposal, own, principal, permit_id, now)

    # 6-7. Take the budget and the spend caps, and claim: a failed claim rolls back and holds
    # no capacity. The claim refuses first what an admin paused.
    budget = attempt_budget(principal_id=principal.id, execution_id=proposal.execution_id,
                            grant_id=admission.grant.id, grant_budget=admission.grant.budget,
                            now=now)
    caps = cap_charges(runtime.policy.approval_rules, contract.qualified_name,
                       admission.arguments, agent=principal.id, tenant=principal.tenant_id,
                       now=now)
    return operation_claim(
        proposal=proposal, permit=permit,
        operation_id=permit.operation_id if permit else new_id("op"),
        actor=principal.name, now=now, budget=budget,
        cost=contract.scheduling_contract.budget_cost, caps=caps,
    )


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
    refusal = permit_refusal(
        approval_state=approval.state if approval else None,
        approval_expires_at=approval.expires_at if approval else None,
        permit=None if own is None else PermitView(
            id=own.id, state=own.state, expires_at=own.expires_at, binding=binding_of(own)),
        proposal=proposal_binding(proposal), now=now)
    if refusal is not None:
        raise refusal
    return own


def _related(instance: Any, name: str) -> Any:
    """A reverse one-to-one loaded by select_related, or None where there is none."""
    try:
        return getattr(instance, name)
    except ObjectDoesNotExist:
        return None


def binding_of(permit: Permit) -> Binding:
    return Binding(digest=permit.digest, requester=permit.requester_id,
                   execution_id=permit.execution_id,
                   contract_fingerprint=permit.contract_fingerprint,
                   destination_fingerprint=permit.destination_fingerprint,
                   policy_fingerprint=permit.policy_fingerprint)


def proposal_binding(proposal: Proposal) -> Binding:
    return Binding(digest=proposal.digest, requester=proposal.principal_id,
                   execution_id=proposal.execution_id,
                   contract_fingerprint=proposal.contract_fingerprint,
                   destination_fingerprint=proposal.destination_fingerprint,
                   policy_fingerprint=proposal.policy_fingerprint)
