"""The enforcing dispatcher (DESIGN §5, spec §7-§8), in the nine steps, in order.

`proposal_dispatch` runs steps 1-7 in the caller's request; `operation_execute` runs 8-9 on a
worker. Every refusal is a `Denial` with its stable code; nothing runs without a committed claim.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import DatabaseError, transaction
from django.utils import timezone

from dispatch.claims import operation_claim
from dispatch.failpoints import failpoint
from dispatch.handlers import (
    DefiniteFailure,
    HandlerContext,
    LookupResult,
    UncertainOutcome,
)
from dispatch.ids import new_id
from dispatch.models import ApprovalRequest, Attempt, Operation, Permit, Principal, Proposal
from dispatch.runtime import get_runtime
from dispatch.services.access import access_operation_by_id, access_proposal_for_dispatch
from dispatch.services.audit import audit_record
from dispatch.services.budgets import budget_keys
from dispatch.services.principals import has_role
from dispatch.services.proposals import (
    check_authority,
    resolve_resources,
    resource_advance,
    snapshot_of,
    validate_arguments,
)
from protocols.canonical import digest
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    OPERATION_LIFECYCLE,
    ApprovalState,
    OperationEvent,
    OperationState,
    PermitState,
    ResourceEvent,
    transition,
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
    check_authority(runtime, contract, principal, resolved.arguments, now)

    # 5. The approval, against the exact canonical proposal.
    # 4 (protocol state) is decided by the claim's compare-and-swap in step 7, after the
    # permit: so every loser of a race for one permit hears `permit_claimed`.
    permit = _permit_for(contract, proposal, own, principal, permit_id, now)

    # 6-7. Take the budget and claim, in one transaction: a failed claim holds no capacity.
    budget = budget_keys(principal_id=principal.id, execution_id=proposal.execution_id, now=now)
    cost = contract.scheduling_contract.budget_cost
    operation = operation_claim(
        proposal=proposal, permit=permit,
        operation_id=permit.operation_id if permit else new_id("op"),
        actor=principal.name, now=now, budget=budget, cost=cost,
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


# --- steps 8-9: on a worker ---------------------------------------------------------------------


def operation_execute(*, operation_id: str, clock: Clock = timezone.now) -> Operation:
    """Run the handler for a claimed operation, at most once per started attempt.

    A redelivered or duplicate task finds the attempt already started (or the operation
    settled) and returns without any I/O. Retries of an uncertain attempt happen here only
    for retry-safe contracts, with the same key, while authority and approval stay valid.
    """
    runtime = get_runtime()
    operation = Operation.objects.select_related("proposal", "permit").get(id=operation_id)
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None:
        return _settle_without_running(operation, "contract no longer registered", clock())
    number = _next_attempt(operation, contract, clock())
    if number is None:
        return operation
    snapshot = json.loads(operation.proposal.canonical)
    while True:
        ctx = HandlerContext(operation_id=operation.id, attempt=number, snapshot=snapshot,
                             timeout=contract.scheduling_contract.timeout,
                             principal_id=operation.principal_id,
                             execution_id=operation.execution_id)
        outcome, result, error = _run_handler(runtime.handler(contract), ctx, contract)
        now = clock()
        retry_reason = None
        if outcome == Attempt.Outcome.UNCERTAIN:
            retry_reason = _retry_refusal(operation, contract, number, now)
            if retry_reason is None:
                # Same key: the destination deduplicates. Ending this attempt and starting
                # the next commit together, so a crash in between leaves no gap.
                time.sleep(settings.RETRY_BACKOFF_SECONDS * 2 ** (number - 1))
                if _attempt_retry(operation, number, error, clock()):
                    number += 1
                    continue
                break
        _record_outcome(operation, contract, number, outcome, result,
                        f"{error}; no retry: {retry_reason}" if retry_reason else error, now)
        break
    operation.refresh_from_db()
    return operation


def _next_attempt(
    operation: Operation, contract: OperationContract, now: datetime
) -> int | None:
    """Start the next attempt, or None when the store does not allow one now.

    An attempt left open by a worker that died is never repeated for a `none` contract: it
    waits for reconciliation. A retry-safe contract repeats it with the same key once the
    contract timeout has passed, while authority and approval remain valid.
    """
    if operation.state != OperationState.CLAIMED:
        return None
    open_attempt = Attempt.objects.filter(operation_id=operation.id,
                                          ended_at__isnull=True).first()
    if open_attempt is None:
        number = operation.attempts_made + 1
        return number if _attempt_start(operation, number, now) else None
    elapsed = (now - open_attempt.started_at).total_seconds()
    overdue = elapsed >= contract.scheduling_contract.timeout
    if not overdue or _retry_refusal(operation, contract, open_attempt.number, now) is not None:
        return None
    if not _attempt_retry(operation, open_attempt.number, "the worker was lost mid-attempt", now):
        return None
    return open_attempt.number + 1


def _run_handler(
    handler: Any, ctx: HandlerContext, contract: OperationContract
) -> tuple[str, dict[str, Any] | None, str]:
    failpoint("attempt.before_call")
    try:
        result = handler.invoke(ctx)
        failpoint("attempt.after_effect")
        return Attempt.Outcome.COMPLETED, result, ""
    except DefiniteFailure as exc:
        return Attempt.Outcome.FAILED_NO_EFFECT, None, exc.reason
    except UncertainOutcome as exc:
        return Attempt.Outcome.UNCERTAIN, None, exc.reason
    except Exception as exc:  # a handler bug: it may have written before failing
        log.exception("handler %s failed", contract.qualified_name)
        read_only = {e.value for e in contract.possible_effects} <= {"read"}
        outcome = Attempt.Outcome.FAILED_NO_EFFECT if read_only else Attempt.Outcome.UNCERTAIN
        return outcome, None, f"{type(exc).__name__}: {exc}"


def _attempt_start(operation: Operation, number: int, now: datetime) -> bool:
    """Record the attempt before any I/O; False if the store does not allow it."""
    with transaction.atomic(durable=True):
        started = Operation.objects.filter(
            id=operation.id, state=OperationState.CLAIMED, attempts_made=number - 1,
        ).update(attempts_made=number, updated_at=now, next_attempt_at=None)
        if started != 1:
            return False
        _attempt_open(operation, number, now, details={"attempt": number})
    return True


def _attempt_retry(operation: Operation, number: int, error: str, now: datetime) -> bool:
    with transaction.atomic(durable=True):
        ended = Attempt.objects.filter(
            operation_id=operation.id, number=number, ended_at__isnull=True,
        ).update(ended_at=now, outcome=Attempt.Outcome.UNCERTAIN, error=error)
        started = Operation.objects.filter(
            id=operation.id, state=OperationState.CLAIMED, attempts_made=number,
        ).update(attempts_made=number + 1, updated_at=now)
        if ended != 1 or started != 1:
            transaction.set_rollback(True)
            return False
        _attempt_open(operation, number + 1, now,
                      details={"attempt": number + 1, "retry_of": number, "error": error})
    return True


def _attempt_open(
    operation: Operation, number: int, now: datetime, *, details: dict[str, Any]
) -> None:
    """Inside the caller's transaction: the attempt row and its audit event, before any I/O."""
    Attempt.objects.create(operation_id=operation.id, number=number, started_at=now)
    audit_record(tenant_id=operation.tenant_id, kind="attempt.started", actor="dispatcher",
                 at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                 details=details)


def _retry_refusal(
    operation: Operation, contract: OperationContract, number: int, now: datetime
) -> str | None:
    """Why an uncertain attempt may not be repeated, or None if it may (spec §8)."""
    if not contract.retry_safe:
        return "the destination does not deduplicate (idempotency none)"
    if number >= contract.scheduling_contract.max_attempts:
        return f"all {contract.scheduling_contract.max_attempts} attempts used"
    permit = operation.permit
    if permit is not None:
        approval = ApprovalRequest.objects.get(id=permit.approval_id)
        if approval.state != ApprovalState.GRANTED or now >= permit.expires_at:
            return "the approval is no longer valid; a new approval is required"
    try:
        check_authority(get_runtime(), contract, operation.principal,
                        json.loads(operation.proposal.canonical)["arguments"], now)
    except Denial as exc:
        return f"authority no longer valid ({exc.code.value})"
    return None


_OUTCOME_EVENTS = {
    Attempt.Outcome.COMPLETED: (OperationEvent.COMPLETE, ResourceEvent.COMPLETE,
                                "operation.completed"),
    Attempt.Outcome.FAILED_NO_EFFECT: (OperationEvent.FAIL_NO_EFFECT,
                                       ResourceEvent.FAIL_NO_EFFECT,
                                       "operation.failed_no_effect"),
    Attempt.Outcome.UNCERTAIN: (OperationEvent.UNCERTAIN, ResourceEvent.UNCERTAIN,
                                "operation.unknown"),
}


def _record_outcome(
    operation: Operation, contract: OperationContract, number: int, outcome: str,
    result: dict[str, Any] | None, error: str, now: datetime,
) -> None:
    """Step 9. If the outcome cannot be recorded after an effect, record `unknown`."""
    try:
        _write_outcome(operation, number, outcome, result, error, now)
    except DatabaseError:
        log.exception("could not record the outcome of %s; recording unknown", operation.id)
        if outcome == Attempt.Outcome.UNCERTAIN:
            return  # reconciliation moves a stale claim to unknown
        # A failure to persist after an effect is unknown, never a silent success or failure.
        try:
            _write_outcome(operation, number, Attempt.Outcome.UNCERTAIN, None,
                           f"outcome {outcome} could not be recorded", now)
        except DatabaseError:
            log.exception("could not record unknown for %s either", operation.id)


def _write_outcome(
    operation: Operation, number: int, outcome: str, result: dict[str, Any] | None,
    error: str, now: datetime,
) -> None:
    op_event, resource_event, kind = _OUTCOME_EVENTS[Attempt.Outcome(outcome)]
    target = transition(OPERATION_LIFECYCLE, OperationState.CLAIMED, op_event)
    with transaction.atomic(durable=True):
        Attempt.objects.filter(operation_id=operation.id, number=number,
                               ended_at__isnull=True).update(
            ended_at=now, outcome=outcome, error=error)
        moved = Operation.objects.filter(id=operation.id, state=OperationState.CLAIMED).update(
            state=target, result=result, updated_at=now)
        if moved != 1:
            return  # settled meanwhile (reconciled after a timeout): keep that record
        for ref in operation.proposal.resource_refs:
            resource_advance(ref=ref, event=resource_event, now=now)
        audit_record(tenant_id=operation.tenant_id, kind=kind, actor="dispatcher", at=now,
                     operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"attempt": number, "error": error})


def _settle_without_running(operation: Operation, reason: str, now: datetime) -> Operation:
    """A claimed operation whose contract vanished never runs: definitely no effect."""
    if operation.state == OperationState.CLAIMED and operation.attempts_made == 0:
        _write_outcome(operation, 0, Attempt.Outcome.FAILED_NO_EFFECT, None, reason, now)
    operation.refresh_from_db()
    return operation


# --- after the fact: reconciliation and human resolution ----------------------------------------


def reconcile_operations(*, now: datetime, enqueue: bool = True) -> dict[str, int]:
    """One pass: stale claims become unknown; unknowns are looked up at the destination.

    Idempotent and safe on several workers: every change is a conditional update.
    """
    runtime = get_runtime()
    counts = {"unknown": 0, "reconciled": 0, "retried": 0, "requeued": 0}
    for operation in Operation.objects.filter(state=OperationState.CLAIMED).select_related(
            "proposal")[:500]:
        contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
        timeout = contract.scheduling_contract.timeout if contract else 15.0
        if (now - operation.updated_at).total_seconds() < timeout:
            continue
        if operation.attempts_made == 0:
            # Claimed but never started (the task was lost): nothing ran, run it now.
            if enqueue:
                from dispatch.tasks import operation_execute_task
                operation_execute_task.delay(operation.id)
            counts["requeued"] += 1
            continue
        with transaction.atomic(durable=True):
            moved = Operation.objects.filter(
                id=operation.id, state=OperationState.CLAIMED,
                attempts_made=operation.attempts_made, updated_at=operation.updated_at,
            ).update(state=transition(OPERATION_LIFECYCLE, OperationState.CLAIMED,
                                      OperationEvent.UNCERTAIN), updated_at=now)
            if moved != 1:
                continue
            Attempt.objects.filter(operation_id=operation.id, ended_at__isnull=True).update(
                ended_at=now, outcome=Attempt.Outcome.UNCERTAIN,
                error=f"no outcome within the contract timeout of {timeout:g}s")
            for ref in operation.proposal.resource_refs:
                resource_advance(ref=ref, event=ResourceEvent.UNCERTAIN, now=now)
            audit_record(tenant_id=operation.tenant_id, kind="operation.unknown",
                         actor="reconciler", at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id,
                         details={"reason": "claimed past its timeout"})
        counts["unknown"] += 1
    for operation in Operation.objects.filter(state=OperationState.UNKNOWN).select_related(
            "proposal", "permit", "principal")[:500]:
        counts_key = _reconcile_one(operation, now, enqueue=enqueue)
        if counts_key:
            counts[counts_key] += 1
    return counts


def _reconcile_one(operation: Operation, now: datetime, *, enqueue: bool) -> str | None:
    runtime = get_runtime()
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None:
        return None
    handler = runtime.handlers[contract.qualified_name]
    found: LookupResult = handler.lookup(operation.id, json.loads(operation.proposal.canonical))
    if found.found == "present":
        _settle_unknown(operation, OperationEvent.RECONCILE_COMPLETED, found.evidence,
                        actor="reconciler", now=now)
        return "reconciled"
    if found.found == "absent" and _retry_refusal(
            operation, contract, operation.attempts_made, now) is None:
        with transaction.atomic(durable=True):
            moved = Operation.objects.filter(id=operation.id, state=OperationState.UNKNOWN,
                                             attempts_made=operation.attempts_made).update(
                state=transition(OPERATION_LIFECYCLE, OperationState.UNKNOWN,
                                 OperationEvent.RETRY),
                evidence=found.evidence, updated_at=now)
            if moved != 1:
                return None
            audit_record(tenant_id=operation.tenant_id, kind="operation.retried",
                         actor="reconciler", at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id, details={"evidence": found.evidence})
            if enqueue:
                operation_enqueue(operation.id)
        return "retried"
    if found.evidence != operation.evidence:
        Operation.objects.filter(id=operation.id, state=OperationState.UNKNOWN).update(
            evidence=found.evidence)
    return None


def _settle_unknown(
    operation: Operation, event: OperationEvent, evidence: str, *, actor: str, now: datetime
) -> Operation:
    target = transition(OPERATION_LIFECYCLE, OperationState(operation.state), event)
    resource_event = (ResourceEvent.RECONCILE_COMPLETED
                      if event is OperationEvent.RECONCILE_COMPLETED
                      else ResourceEvent.RECONCILE_NO_EFFECT)
    with transaction.atomic(durable=True):
        moved = Operation.objects.filter(id=operation.id, state=OperationState.UNKNOWN).update(
            state=target, evidence=evidence, updated_at=now)
        if moved != 1:
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                         "The operation is no longer unknown; reload it.")
        for ref in operation.proposal.resource_refs:
            resource_advance(ref=ref, event=resource_event, now=now)
        audit_record(tenant_id=operation.tenant_id, kind="operation.reconciled", actor=actor,
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"outcome": target.value, "evidence": evidence})
    operation.refresh_from_db()
    return operation


def operation_resolve(
    *, admin: Principal, operation_id: object, outcome: object, evidence: object, now: datetime,
) -> Operation:
    """An admin settles an unknown outcome with a note of the evidence."""
    operation = access_operation_by_id(admin, operation_id)
    if not has_role(admin, "admin"):
        raise Denial(DenialCode.ROLE_REQUIRED, role="admin")
    events = {"completed": OperationEvent.RECONCILE_COMPLETED,
              "no_effect": OperationEvent.RECONCILE_NO_EFFECT}
    if outcome not in events:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/outcome", "message": "must be 'completed' or 'no_effect'"}])
    if not isinstance(evidence, str) or not evidence.strip():
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/evidence", "message": "a note of the evidence is required"}])
    if operation.state != OperationState.UNKNOWN:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     f"The operation is '{operation.state}'; only unknown outcomes are resolved.")
    return _settle_unknown(operation, events[str(outcome)], evidence.strip(),
                           actor=admin.name, now=now)
