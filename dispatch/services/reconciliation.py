"""After the fact (docs/design.md#reconciliation): operations left `claimed` past their timeout
become `unknown`, and unknowns are looked up at their destination; admins resolve what a lookup
cannot. An approved `dispatch_on_approval` permit whose task was lost before the worker's claim
is handed to a worker again.

Bounded and observable: one pass at a time (a lease), at most `RECONCILE_BATCH` operations per
pass, every lookup bounded by `RECONCILE_LOOKUP_TIMEOUT`, a lookup that raises or hangs is
inconclusive for that operation only, and every change of evidence is an audit event. An
authoritative absence allows a retry with the same operation id only where the contract's
retry rules allow it now (docs/design.md#reconciliation); otherwise the admin sees "absent per
lookup" and decides.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from dispatch.failpoints import failpoint
from dispatch.models import Attempt, Operation, Principal
from dispatch.queue import execute_now, execute_on_commit, run_now
from dispatch.runtime import get_runtime
from dispatch.services.access import access_operation_by_id
from dispatch.services.attempts import delivery_fence, delivery_fenced, retry_refusal
from dispatch.services.authority import require_role
from dispatch.services.leases import lease
from dispatch.services.lookups import lookup_bounded, lookup_record
from dispatch.services.operations import operation_evidence, operation_move
from dispatch.services.renewals import renewals_withdraw
from dispatch.services.runs import unclaimed_permits
from protocols.contracts import Reconciliation
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationEvent, OperationState
from protocols.roles import Role

log = logging.getLogger(__name__)

#: The counts a pass reports, by what happened to each operation.
COUNTS = ("unknown", "reconciled", "retried", "requeued", "inconclusive", "stuck")


def reconcile_operations(*, now: datetime, enqueue: bool = True) -> JSONObject:
    """One pass: stale claims become unknown; unknowns are looked up at the destination.

    Only one pass runs at a time; a second caller returns at once with `"skipped": true`.
    Safe beside workers anyway: every change is a conditional update.
    """
    counts: JSONObject = dict.fromkeys(COUNTS, 0)
    with lease("reconcile-pass", ttl=settings.RECONCILE_LEASE_SECONDS) as held:
        if not held:
            return {**counts, "skipped": True}
        failpoint("reconcile.pass_leased")
        batch = settings.RECONCILE_BATCH
        for step, state in ((_reconcile_claimed, OperationState.CLAIMED),
                            (_reconcile_unknown, OperationState.UNKNOWN)):
            for operation in _operations(state)[:batch]:
                key = _one(step, operation, now, enqueue)
                if key:
                    counts[key] += 1
                # The lease lasts RECONCILE_LEASE_SECONDS from the last operation, so that a
                # pass whose process died stops blocking the next ones soon (one step is
                # bounded by the lookup timeout); a pass that lost it stops there.
                if not held.renew():
                    return counts
        # Approved, never claimed: the worker's task was lost before its claim. The claim
        # decides again (a duplicate loses it), so handing it over twice runs nothing twice.
        grace = timedelta(seconds=settings.RECONCILE_UNCLAIMED_GRACE_SECONDS)
        lost = unclaimed_permits(now=now, grace=grace, limit=batch)
        for proposal_id, principal_id in lost if enqueue else ():
            run_now(proposal_id, principal_id)
    return {**counts, "requeued_unclaimed": len(lost)}


def _one(step: Callable[..., str | None], operation: Operation, now: datetime,
         enqueue: bool) -> str | None:
    """One operation of a pass: a move its records refuse (a resource that moved on, say) is
    logged and counted `stuck`, never the end of the pass for every other operation."""
    try:
        return step(operation, now, enqueue=enqueue)
    except Denial as denial:
        log.error("reconciliation could not move %s: %s", operation.id, denial)
        return "stuck"


def operation_reconcile(*, operation_id: str, now: datetime, enqueue: bool = True) -> str | None:
    """Reconcile one operation now (a stale claim or an unknown); what happened to it, or None
    when there was nothing to do or another process is reconciling it."""
    with lease(f"reconcile:{operation_id}", ttl=settings.RECONCILE_LEASE_SECONDS) as held:
        if not held:
            return None
        operation = _operations(OperationState.CLAIMED, OperationState.UNKNOWN).filter(
            id=operation_id).first()
        if operation is None:
            return None
        if operation.state == OperationState.CLAIMED:
            return _reconcile_claimed(operation, now, enqueue=enqueue)
        return _reconcile_unknown(operation, now, enqueue=enqueue)


def _operations(*states: OperationState) -> QuerySet[Operation]:
    return Operation.objects.filter(state__in=states).select_related(
        "proposal", "permit", "principal").order_by("updated_at")


def _reconcile_claimed(operation: Operation, now: datetime, *, enqueue: bool) -> str | None:
    contract = get_runtime().registry.by_fingerprint(operation.contract_fingerprint)
    timeout = contract.scheduling_contract.timeout if contract else 15.0
    if (now - operation.updated_at).total_seconds() < timeout:
        return None
    if operation.attempts_made == 0 or not Attempt.objects.filter(
            operation_id=operation.id, ended_at__isnull=True).exists():
        # Claimed but its next attempt never started (the task was lost: the first one, or
        # the one after a same-key retry or a renewed approval): nothing runs, run it now.
        if enqueue:
            execute_now(operation.id)
        return "requeued"
    moved = operation_move(
        operation, OperationEvent.UNCERTAIN, attempt=operation.attempts_made,
        now=now, actor="reconciler", updated_at=operation.updated_at,
        end_attempt=Attempt.Outcome.UNCERTAIN,
        error=f"no outcome within the contract timeout of {timeout:g}s",
        details={"reason": "claimed past its timeout"})
    return "unknown" if moved else None


def _reconcile_unknown(operation: Operation, now: datetime, *, enqueue: bool) -> str:
    runtime = get_runtime()
    contract = runtime.registry.by_fingerprint(operation.contract_fingerprint)
    if contract is None:
        _note(operation, "no lookup: the contract is no longer registered", now)
        return "inconclusive"
    if contract.reconciliation is Reconciliation.NONE:
        _note(operation, "no lookup: the contract declares reconciliation none; an admin "
              "resolves it", now)
        return "inconclusive"
    snapshot = json.loads(operation.proposal.canonical)
    found = lookup_bounded(runtime.handler(contract), operation.id, snapshot)
    lookup_record(operation, found, now)
    if not contract.reconciliation.settles(found.found):
        # What the contract says its lookups cannot prove settles nothing.
        what = (f"{found.evidence} (reconciliation {contract.reconciliation.value}: an "
                f"absence is no proof)" if found.found == "absent" else found.evidence)
        _note(operation, what, now)
        return "inconclusive"
    if found.found == "present":
        if not operation_move(operation, OperationEvent.RECONCILE_COMPLETED,
                              attempt=operation.attempts_made, now=now, actor="reconciler",
                              evidence=found.evidence):
            return "inconclusive"  # moved meanwhile (an admin, a renewal): this pass goes on
        return "reconciled"
    # An absence, authoritative as the contract says: retry with the same key, if allowed.
    # Once no request of an earlier attempt can still be on its way, the absence is proof
    # that nothing happened, and the operation is no longer uncertain
    # (docs/design.md#reconciliation).
    proven = delivery_fenced(operation, contract, now)
    refusal = retry_refusal(operation, contract, operation.attempts_made, now,
                            absence_proven=proven)
    if refusal is None:
        if operation_move(operation, OperationEvent.RETRY,
                          attempt=operation.attempts_made, now=now, actor="reconciler",
                          evidence=found.evidence, absence_proven=proven):
            if enqueue:
                execute_on_commit(operation.id)
            return "retried"
        return "inconclusive"
    if not proven and not contract.retry_safe:
        fence = delivery_fence(contract).total_seconds()
        refusal += (f" (attempt {operation.attempts_made} may still be delivered until "
                    f"{fence:g}s after it started; asked again then)")
    _note(operation, f"absent per lookup: {found.evidence}; no retry: {refusal}", now)
    return "inconclusive"


def _note(operation: Operation, evidence: str, now: datetime) -> None:
    operation_evidence(operation=operation, evidence=evidence, actor="reconciler", now=now)


def _settle_unknown(
    operation: Operation, event: OperationEvent, evidence: str, *, actor: str, now: datetime
) -> Operation:
    if not operation_move(operation, event, attempt=operation.attempts_made,
                          now=now, actor=actor, evidence=evidence):
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     "The operation is no longer unknown; reload it.")
    return operation


def operation_resolve(
    *, admin: Principal, operation_id: object, outcome: object, evidence: object, now: datetime,
) -> Operation:
    """An admin settles an unknown outcome with a note of the evidence."""
    operation = access_operation_by_id(admin, operation_id)
    require_role(admin, Role.ADMIN)
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
    with transaction.atomic():
        # Its pending renewal first (the renewal's row, then the operation's, as a grant
        # locks them): a settled operation is never attempted again, and a refused
        # resolution rolls the withdrawal back with it.
        renewals_withdraw(operation, now=now, actor=admin.name, resolved=str(outcome))
        return _settle_unknown(operation, events[str(outcome)], evidence.strip(),
                               actor=admin.name, now=now)
