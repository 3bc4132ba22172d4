"""The one owner of an operation's state and of its attempt rows (spec §8, DESIGN §5).

Every change of an operation's `state` or `attempts_made` is made here, by one conditional
UPDATE whose WHERE names the state the transition table allows the event from and the attempt
the change settles (`attempts_made = attempt`), with the attempt row's own conditional UPDATE
(`ended_at IS NULL`) beside it. Both row counts are read: if either is not 1 the whole move rolls
back and the caller hears `False`. So a late answer of an older attempt never settles an
operation that a newer attempt (a retry, a reconciliation) is working on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from dispatch.models import Attempt, Operation, Permit, Proposal
from dispatch.services.audit import audit_record
from dispatch.services.resources import resource_move
from protocols.lifecycle import (
    OPERATION_LIFECYCLE,
    OperationEvent,
    OperationState,
    ResourceEvent,
    transition,
)

#: The operation event an attempt's outcome asks for.
OUTCOME_EVENTS = {
    Attempt.Outcome.COMPLETED: OperationEvent.COMPLETE,
    Attempt.Outcome.FAILED_NO_EFFECT: OperationEvent.FAIL_NO_EFFECT,
    Attempt.Outcome.UNCERTAIN: OperationEvent.UNCERTAIN,
}

_ATTEMPT_EVENTS = frozenset(OUTCOME_EVENTS.values())

#: What each operation state leaves the referenced resources in (None: they stay).
_RESOURCE_EVENTS = {
    OperationState.COMPLETED: ResourceEvent.COMPLETE,
    OperationState.FAILED_NO_EFFECT: ResourceEvent.FAIL_NO_EFFECT,
    OperationState.UNKNOWN: ResourceEvent.UNCERTAIN,
    OperationState.RECONCILED_COMPLETED: ResourceEvent.RECONCILE_COMPLETED,
    OperationState.RECONCILED_NO_EFFECT: ResourceEvent.RECONCILE_NO_EFFECT,
    OperationState.CLAIMED: None,
}

_AUDIT_KINDS = {
    OperationState.COMPLETED: "operation.completed",
    OperationState.FAILED_NO_EFFECT: "operation.failed_no_effect",
    OperationState.UNKNOWN: "operation.unknown",
    OperationState.RECONCILED_COMPLETED: "operation.reconciled",
    OperationState.RECONCILED_NO_EFFECT: "operation.reconciled",
    OperationState.CLAIMED: "operation.retried",
}


_CLAIMED = transition(OPERATION_LIFECYCLE, OPERATION_LIFECYCLE.initial, OperationEvent.CLAIM)


class _Lost(Exception):
    """A guard did not hold: roll the move back."""


def operation_move(
    *,
    operation: Operation,
    event: OperationEvent,
    attempt: int,
    now: datetime,
    actor: str,
    end_attempt: str | None = None,
    error: str = "",
    result: dict[str, Any] | None = None,
    evidence: str | None = None,
    updated_at: datetime | None = None,
    details: dict[str, Any] | None = None,
) -> bool:
    """Move `operation` by `event`, as the settlement of attempt number `attempt`.

    Holds only while the operation is still in the state it was loaded in, and its latest
    attempt is `attempt` (0: none was started); `updated_at`, when given, must be unchanged too.
    `end_attempt` ends that attempt row with this outcome, and the row must still be open.
    The resources move with the operation and the audit event is written in the same
    transaction. Returns whether it moved; the caller's `operation` is updated when it did.
    """
    source = OperationState(operation.state)
    target = transition(OPERATION_LIFECYCLE, source, event)
    guard: dict[str, Any] = {"id": operation.id, "state": source, "attempts_made": attempt}
    if updated_at is not None:
        guard["updated_at"] = updated_at
    fields: dict[str, Any] = {"state": target, "updated_at": now}
    if event in _ATTEMPT_EVENTS:  # an attempt's answer replaces the result; others keep it
        fields["result"] = result
    if evidence is not None:
        fields["evidence"] = evidence
    try:
        with transaction.atomic():
            if Operation.objects.filter(**guard).update(**fields) != 1:
                raise _Lost
            if end_attempt is not None and Attempt.objects.filter(
                    operation_id=operation.id, number=attempt, ended_at__isnull=True,
            ).update(ended_at=now, outcome=end_attempt, error=error) != 1:
                raise _Lost
            resource_event = _RESOURCE_EVENTS[target]
            if resource_event is not None:
                for ref in operation.proposal.resource_refs:
                    resource_move(ref=ref, event=resource_event, now=now)
            audit_record(
                tenant_id=operation.tenant_id, kind=_AUDIT_KINDS[target], actor=actor, at=now,
                operation_id=operation.id, proposal_id=operation.proposal_id,
                details={"attempt": attempt, "outcome": target.value,
                         **({"error": error} if error else {}),
                         **({"evidence": evidence} if evidence is not None else {}),
                         **(details or {})})
    except _Lost:
        return False
    operation.state, operation.updated_at = target, now
    if "result" in fields:
        operation.result = result
    if evidence is not None:
        operation.evidence = evidence
    return True


def operation_open(
    *, proposal: Proposal, permit: Permit | None, operation_id: str, now: datetime,
) -> Operation:
    """Inside the claim's transaction: insert the operation intent, `pending -> claimed` by
    the table. One operation per proposal is the database's rule: a second insert raises
    IntegrityError, and the caller's transaction must then roll back whole."""
    return Operation.objects.create(
        id=operation_id, tenant_id=proposal.tenant_id, proposal_id=proposal.id,
        permit=permit, principal_id=proposal.principal_id,
        execution_id=proposal.execution_id, operation=proposal.operation,
        contract_fingerprint=proposal.contract_fingerprint, state=_CLAIMED,
        claimed_at=now, updated_at=now,
    )


_MINT = object()


@dataclass(frozen=True)
class StartedAttempt:
    """Proof, minted only here, that this process started attempt `number` of `operation_id`
    by its conditional update in a committed transaction: the dispatcher's invoke path needs
    no second look at the store for it (spec §7)."""

    operation_id: str
    number: int
    mint: object = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.mint is not _MINT:
            raise TypeError("a StartedAttempt is minted by attempt_start or attempt_retry only")


def attempt_start(operation: Operation, number: int, now: datetime) -> StartedAttempt | None:
    """Record attempt `number` before any I/O; None if the store does not allow it (settled,
    or another worker started it)."""
    with transaction.atomic(durable=True):
        started = Operation.objects.filter(
            id=operation.id, state=OperationState.CLAIMED, attempts_made=number - 1,
        ).update(attempts_made=number, updated_at=now, next_attempt_at=None)
        if started != 1:
            return None
        _attempt_open(operation, number, now, details={"attempt": number})
    operation.attempts_made, operation.updated_at = number, now
    return StartedAttempt(operation.id, number, _MINT)


def attempt_retry(
    operation: Operation, number: int, error: str, now: datetime
) -> StartedAttempt | None:
    """End uncertain attempt `number` and start `number + 1` with the same key, together, so a
    crash in between leaves no gap; None if either guard does not hold."""
    with transaction.atomic(durable=True):
        ended = Attempt.objects.filter(
            operation_id=operation.id, number=number, ended_at__isnull=True,
        ).update(ended_at=now, outcome=Attempt.Outcome.UNCERTAIN, error=error)
        started = Operation.objects.filter(
            id=operation.id, state=OperationState.CLAIMED, attempts_made=number,
        ).update(attempts_made=number + 1, updated_at=now)
        if ended != 1 or started != 1:
            transaction.set_rollback(True)
            return None
        _attempt_open(operation, number + 1, now,
                      details={"attempt": number + 1, "retry_of": number, "error": error})
    operation.attempts_made, operation.updated_at = number + 1, now
    return StartedAttempt(operation.id, number + 1, _MINT)


def _attempt_open(
    operation: Operation, number: int, now: datetime, *, details: dict[str, Any]
) -> None:
    """Inside the caller's transaction: the attempt row and its audit event, before any I/O."""
    Attempt.objects.create(operation_id=operation.id, number=number, started_at=now)
    audit_record(tenant_id=operation.tenant_id, kind="attempt.started", actor="dispatcher",
                 at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                 details=details)


def operation_evidence(
    *, operation: Operation, evidence: str, actor: str, now: datetime
) -> bool:
    """Record new evidence on an operation whose state does not change (an inconclusive
    lookup, an authoritative absence that allows no retry), audited; False if it moved on."""
    if evidence == operation.evidence:
        return False
    with transaction.atomic():
        changed = Operation.objects.filter(
            id=operation.id, state=operation.state, attempts_made=operation.attempts_made,
        ).update(evidence=evidence)
        if changed != 1:
            return False
        audit_record(tenant_id=operation.tenant_id, kind="operation.evidence", actor=actor,
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"evidence": evidence, "previous": operation.evidence})
    operation.evidence = evidence
    return True


def attempt_answer_ignored(
    *, operation: Operation, attempt: int, outcome: str, error: str, now: datetime
) -> None:
    """A late answer of an attempt that no longer settles the operation: kept as evidence for
    whoever resolves it, never as the outcome."""
    with transaction.atomic():
        audit_record(tenant_id=operation.tenant_id, kind="attempt.ignored", actor="dispatcher",
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     details={"attempt": attempt, "outcome": outcome, "error": error,
                              "reason": "a newer attempt or a reconciliation settles it"})
