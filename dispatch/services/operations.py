"""The one owner of an operation's state and of its attempt rows
(docs/design.md#outcomes, #dispatcher).

Every change of an operation's `state` or `attempts_made` is made here, by one conditional
UPDATE whose WHERE names the state the transition table allows the event from and the attempt
the change settles (`attempts_made = attempt`), with the attempt row's own conditional UPDATE
(`ended_at IS NULL`) beside it. Both row counts are read: if either is not 1 the whole move rolls
back and the caller hears `False`. So a late answer of an older attempt never settles an
operation that a newer attempt (a retry, a reconciliation) is working on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from dispatch.hooks import Issuance, outcome_context
from dispatch.models import Attempt, Operation
from dispatch.runtime import get_runtime
from dispatch.services.audit import (
    AUDIT_COLUMNS,
    AUDIT_INSERT,
    AUDIT_PLACEHOLDERS,
    audit_binding,
    audit_moves,
    audit_record,
    audit_text,
    audit_values,
)
from dispatch.services.notifications import notify_write, outcome_notifications
from dispatch.services.pauses import attempt_paused
from dispatch.services.resources import moved_refs, resource_move
from dispatch.services.run_tree import execution_stopped
from dispatch.services.statements import is_postgres, rows, run, statement, value
from dispatch.services.wakeups import wake_on_slot
from protocols.audit_kinds import ATTEMPT_STARTED, ATTEMPT_UNCERTAIN, OPERATION_EVENT_KINDS
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.lifecycle import (
    OPERATION_LIFECYCLE,
    OperationEvent,
    OperationState,
    transition,
)

#: The operation event an attempt's outcome asks for.
OUTCOME_EVENTS = {
    Attempt.Outcome.COMPLETED: OperationEvent.COMPLETE,
    Attempt.Outcome.FAILED_NO_EFFECT: OperationEvent.FAIL_NO_EFFECT,
    Attempt.Outcome.UNCERTAIN: OperationEvent.UNCERTAIN,
}

_ATTEMPT_EVENTS = frozenset(OUTCOME_EVENTS.values())

OPERATION_CLAIMED = transition(OPERATION_LIFECYCLE, OPERATION_LIFECYCLE.initial,
                               OperationEvent.CLAIM)


class _Lost(Exception):
    """A guard did not hold: roll the move back."""


# The hot statements, written once (dispatch.services.statements). Identifiers are Django's
# default names for these models (tests/unit/test_statements.py checks they still are); every
# value is a bound parameter.
_MOVE = statement(
    "operation.move",
    'UPDATE "dispatch_operation" SET "state" = %s, "updated_at" = %s, '
    '"result" = CASE WHEN %s THEN %s ELSE "result" END, '
    '"evidence" = COALESCE(%s, "evidence"), "uncertain" = %s '
    'WHERE "id" = %s AND "state" = %s AND "attempts_made" = %s AND "uncertain" = %s '
    'AND (%s OR "updated_at" = %s)')
_END_ATTEMPT = statement(
    "attempt.end",
    'UPDATE "dispatch_attempt" SET "ended_at" = %s, "outcome" = %s, "error" = %s '
    'WHERE "operation_id" = %s AND "number" = %s AND "ended_at" IS NULL')
# PostgreSQL: the same writes in one round trip. Every writer of an attempt row updates its
# operation row first, so that row's lock orders them; the attempt moves only where the
# operation did, and the audit row is written only where both did.
_PG_MOVE_AND_END = statement(
    "operation.move_and_end", vendor="postgresql",
    sql=f"WITH op AS ({_MOVE} RETURNING 1), "
    f"att AS ({_END_ATTEMPT} AND EXISTS (SELECT 1 FROM op) RETURNING 1), "
    f'au AS (INSERT INTO "dispatch_auditevent" ({AUDIT_COLUMNS}) SELECT {AUDIT_PLACEHOLDERS} '
    "WHERE EXISTS (SELECT 1 FROM att) RETURNING 1) "
    "SELECT (SELECT count(*) FROM op), (SELECT count(*) FROM att)")
_PG_MOVE = statement(
    "operation.move_with_audit", vendor="postgresql",
    sql=f"WITH op AS ({_MOVE} RETURNING 1), "
    f'au AS (INSERT INTO "dispatch_auditevent" ({AUDIT_COLUMNS}) SELECT {AUDIT_PLACEHOLDERS} '
    "WHERE EXISTS (SELECT 1 FROM op) RETURNING 1) "
    "SELECT (SELECT count(*) FROM op), 1")
# A new attempt starts only where the one before it has ended (none is open).
_START = statement(
    "attempt.start_guard",
    'UPDATE "dispatch_operation" SET "attempts_made" = %s, "updated_at" = %s, '
    '"next_attempt_at" = NULL WHERE "id" = %s AND "state" = %s AND "attempts_made" = %s '
    'AND NOT EXISTS (SELECT 1 FROM "dispatch_attempt" a '
    'WHERE a."operation_id" = "dispatch_operation"."id" AND a."ended_at" IS NULL)')
# An uncertain attempt ends while the operation stays claimed for a retry under the same key;
# the operation remembers the uncertainty (sticky, docs/design.md#outcomes).
_HOLD = statement(
    "operation.hold",
    'UPDATE "dispatch_operation" SET "uncertain" = TRUE, "next_attempt_at" = %s, '
    '"updated_at" = %s WHERE "id" = %s AND "state" = %s AND "attempts_made" = %s')
# SQLite's; PostgreSQL inserts the attempt row inside `_PG_START`.
_INSERT_ATTEMPT = statement(
    "attempt.insert", vendor="sqlite",
    sql='INSERT INTO "dispatch_attempt" ("operation_id", "number", "started_at", "ended_at", '
    "\"outcome\", \"error\") VALUES (%s, %s, %s, NULL, '', '')")
_PG_START = statement(
    "attempt.start", vendor="postgresql",
    sql=f"WITH op AS ({_START} RETURNING 1), "
    'att AS (INSERT INTO "dispatch_attempt" ("operation_id", "number", "started_at", '
    "\"ended_at\", \"outcome\", \"error\") SELECT %s, %s, %s, NULL, '', '' "
    "WHERE EXISTS (SELECT 1 FROM op) RETURNING 1), "
    f'au AS (INSERT INTO "dispatch_auditevent" ({AUDIT_COLUMNS}) SELECT {AUDIT_PLACEHOLDERS} '
    "WHERE EXISTS (SELECT 1 FROM op) RETURNING 1) "
    "SELECT count(*) FROM op")
OPERATION_INSERT = statement(
    "operation.insert",
    'INSERT INTO "dispatch_operation" ("id", "tenant_id", "proposal_id", "permit_id", '
    '"principal_id", "execution_id", "operation", "contract_fingerprint", "state", '
    '"attempts_made", "uncertain", "next_attempt_at", "result", "evidence", "lookup_found", '
    '"looked_up_at", "claimed_at", "updated_at") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, FALSE, NULL, NULL, '', '', NULL, %s, %s)")
#: The same insert inside a CTE, only where the statement named `after` changed a row.
OPERATION_INSERT_IF = OPERATION_INSERT.replace(
    "VALUES (", "SELECT ").removesuffix(")") + " WHERE EXISTS (SELECT 1 FROM {after})"


def operation_move(
    operation: Operation,
    event: OperationEvent,
    *,
    attempt: int,
    now: datetime,
    actor: str,
    end_attempt: str | None = None,
    error: str = "",
    result: JSONObject | None = None,
    evidence: str | None = None,
    updated_at: datetime | None = None,
    details: JSONObject | None = None,
    absence_proven: bool = False,
) -> bool:
    """Move `operation` by `event`, as the settlement of attempt number `attempt`.

    Holds only while the operation is still in the state it was loaded in, its latest attempt
    is `attempt` (0: none was started) and its uncertainty is as loaded; `updated_at`, when
    given, must be unchanged too. `end_attempt` ends that attempt row with this outcome, and
    the row must still be open. The resources move with the operation and the audit event is
    written in the same transaction, and so are what the contract's outcome hook issues
    (`_outcome_issuance`) and the proposing agent's outcome notifications. Returns whether it
    moved; the caller's `operation` is updated when it did.

    Uncertainty is sticky (docs/design.md#outcomes): once an attempt was uncertain, `fail_no_effect`
    (a definite failure of a later attempt, a cancellation, a refused retry) moves the operation
    to `unknown`, never to `failed_no_effect`, until an authoritative lookup proves the key
    absent (`absence_proven`, given with the retry that follows it).
    """
    source = OperationState(operation.state)
    sticky = event is OperationEvent.FAIL_NO_EFFECT and bool(operation.uncertain)
    if sticky:
        event = OperationEvent.UNCERTAIN
    target = transition(OPERATION_LIFECYCLE, source, event)
    uncertain = (bool(operation.uncertain) or target is OperationState.UNKNOWN
                 or end_attempt == Attempt.Outcome.UNCERTAIN) and not absence_proven
    answers = event in _ATTEMPT_EVENTS  # an attempt's answer replaces the result; others keep it
    # What the contract's outcome hook issues (a receipt, an attestation), written only where
    # this move holds; the result the operation keeps names it.
    issuance = _outcome_issuance(operation, target, result, now)
    if issuance is not None:
        result = issuance.result
    move = [target.value, value(Operation, "updated_at", now),
            answers, value(Operation, "result", result), evidence, uncertain,
            operation.id, source.value, attempt, bool(operation.uncertain),
            updated_at is None, value(Operation, "updated_at", updated_at)]
    end = [value(Attempt, "ended_at", now), end_attempt, error, operation.id, attempt]
    proposal = operation.proposal  # loaded with the operation by every caller
    refs = moved_refs(proposal.resource_refs)
    if refs:  # what the contract declares this outcome does to them (`protocol_outcomes`)
        resource_event = get_runtime().resource_event(operation.contract_fingerprint, target,
                                                      event)
    audit = audit_values(
        tenant_id=operation.tenant_id, kind=OPERATION_EVENT_KINDS[event], actor=actor, at=now,
        operation_id=operation.id, proposal_id=operation.proposal_id, digest=proposal.digest,
        details={"attempt": attempt, "outcome": target.value,
                 **({"error": audit_text(proposal, error)} if error else {}),
                 **({"evidence": audit_text(proposal, evidence)} if evidence is not None
                    else {}),
                 **({"sticky": "an earlier attempt may have had its effect"} if sticky
                    else {}),
                 **({"absence_proven": True} if absence_proven else {}),
                 **audit_binding(proposal), **(details or {}),
                 **(audit_moves(refs, resource_event) if refs else {})})
    # The agent's outcome webhooks (docs/design.md#notifications), written only where the move
    # holds, in its transaction; none without an endpoint that asked.
    outbox = outcome_notifications(operation, target.value, now)
    try:
        with transaction.atomic():
            if is_postgres() and not refs and issuance is None:
                sql, params = ((_PG_MOVE_AND_END, [*move, *end, *audit]) if end_attempt
                               else (_PG_MOVE, [*move, *audit]))
                ((moved, ended),) = rows(sql, params)
                if moved != 1 or ended != 1:
                    raise _Lost  # the operation moved but its attempt did not: undo both
            else:
                if run(_MOVE, move) != 1:
                    raise _Lost
                if end_attempt is not None and run(_END_ATTEMPT, end) != 1:
                    raise _Lost
                for ref in refs:
                    resource_move(ref=ref, event=resource_event, now=now)
                run(AUDIT_INSERT, audit)
                if issuance is not None:
                    issuance.write()
            notify_write(outbox)
    except _Lost:
        return False
    operation.state, operation.updated_at, operation.uncertain = target, now, uncertain
    if answers:
        operation.result = result
    if evidence is not None:
        operation.evidence = evidence
    if source is OperationState.CLAIMED and target is not OperationState.CLAIMED:
        # Settled: a slot of its run is free for the lane that waits longest for one.
        wake_on_slot(operation.execution_id)
    return True


def _outcome_issuance(operation: Operation, target: OperationState,
                      result: JSONObject | None, now: datetime) -> Issuance | None:
    """What the outcome hook registered with the operation's contract issues on its move to
    `target` (`dispatch.hooks`), or None. The contract the proposal was made under; after an
    upgrade, the newest of its name (an admin's resolve of an old operation still runs its
    hook)."""
    runtime = get_runtime()
    try:
        contract = runtime.contract_for(operation.operation, operation.contract_fingerprint)
    except Denial:
        return None
    hook = runtime.outcome_hooks.get((contract.qualified_name, contract.contract_version))
    if hook is None:
        return None
    arguments = dict(json.loads(operation.proposal.canonical)["arguments"])
    return hook(outcome_context(operation=operation, contract=contract, target=target,
                                result=result, arguments=arguments, now=now))


_MINT = object()


@dataclass(frozen=True)
class StartedAttempt:
    """Proof, minted only here, that this process started attempt `number` of `operation_id`
    by its conditional update in a committed transaction: the dispatcher's invoke path needs
    no second look at the store for it (docs/design.md#dispatcher)."""

    operation_id: str
    number: int
    mint: object = field(repr=False, compare=False, default=None)
    # The operation's qualified name: the proof opens only its own contract's handler.
    operation: str = ""

    def __post_init__(self) -> None:
        if self.mint is not _MINT:
            raise TypeError("a StartedAttempt is minted by attempt_start or attempt_open only")


def attempt_start(operation: Operation, number: int, now: datetime) -> StartedAttempt | None:
    """Record the first attempt before any I/O (the claim made every check); None if the store
    does not allow it (settled, or another worker started it) or an admin paused it since.
    Every later attempt is started by `dispatch.services.attempts.attempt_next`, which checks
    again."""
    with transaction.atomic(durable=True):
        if attempt_paused(operation):
            return None  # it waits, claimed, for the resume (docs/design.md#approval-policies)
        if execution_stopped(operation.execution_id, operation.principal_id, now=now,
                             lock=True) is not None:
            return None  # its run ended: the stop ends it without effect (run_stops)
        started = attempt_open(operation, number, now, details={"attempt": number})
    return started


def attempt_open(
    operation: Operation, number: int, now: datetime, *, details: JSONObject,
) -> StartedAttempt | None:
    """Inside the caller's transaction: start attempt `number`, the one after the latest, while
    the operation is claimed and no attempt of it is open; None if that does not hold."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("attempt_open runs inside its caller's transaction")
    if not _attempt_insert(operation, number, now, previous=number - 1, details=details):
        return None
    # What `_START` wrote: a started attempt is no longer due at a time.
    operation.attempts_made, operation.updated_at, operation.next_attempt_at = number, now, None
    return StartedAttempt(operation.id, number, _MINT, operation.operation)


def attempt_hold(
    operation: Operation, number: int, error: str, now: datetime, *, retry_at: datetime,
) -> bool:
    """End uncertain attempt `number` while the operation stays claimed for a further attempt
    under the same key, no earlier than `retry_at`; the operation is uncertain from now on.
    False if the operation moved on or the attempt was no longer open (nothing written)."""
    hold = [value(Operation, "next_attempt_at", retry_at), value(Operation, "updated_at", now),
            operation.id, OperationState.CLAIMED.value, number]
    end = [value(Attempt, "ended_at", now), Attempt.Outcome.UNCERTAIN, error, operation.id,
           number]
    proposal = operation.proposal
    with transaction.atomic():  # its own, or a part of `attempt_next`'s
        if run(_HOLD, hold) != 1 or run(_END_ATTEMPT, end) != 1:
            transaction.set_rollback(True)
            return False
        audit_record(tenant_id=operation.tenant_id, kind=ATTEMPT_UNCERTAIN, actor="dispatcher",
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     digest=proposal.digest,
                     details={"attempt": number, "error": audit_text(proposal, error),
                              "retry_at": retry_at.isoformat(), **audit_binding(proposal)})
    operation.uncertain, operation.next_attempt_at, operation.updated_at = True, retry_at, now
    return True


def _attempt_insert(
    operation: Operation, number: int, now: datetime, *, previous: int,
    details: JSONObject,
) -> bool:
    """Inside the caller's transaction: move `attempts_made` from `previous` to `number` (the
    guard), insert the attempt row and its audit event, before any I/O; False if the guard
    did not hold (nothing written)."""
    at = value(Operation, "updated_at", now)
    start = [number, at, operation.id, OperationState.CLAIMED.value, previous]
    attempt = [operation.id, number, value(Attempt, "started_at", now)]
    proposal = operation.proposal
    audit = audit_values(tenant_id=operation.tenant_id, kind=ATTEMPT_STARTED,
                         actor="dispatcher", at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id, digest=proposal.digest,
                         details={**details, **audit_binding(proposal)})
    if is_postgres():
        ((started,),) = rows(_PG_START, [*start, *attempt, *audit])
        return bool(started == 1)
    if run(_START, start) != 1:
        return False
    run(_INSERT_ATTEMPT, attempt)
    run(AUDIT_INSERT, audit)
    return True


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
        proposal = operation.proposal
        audit_record(tenant_id=operation.tenant_id, kind="operation.evidence", actor=actor,
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     digest=proposal.digest,
                     details={"evidence": audit_text(proposal, evidence),
                              "previous": audit_text(proposal, operation.evidence),
                              **audit_binding(proposal)})
    operation.evidence = evidence
    return True


def attempt_answer_ignored(
    *, operation: Operation, attempt: int, outcome: str, error: str, now: datetime
) -> None:
    """A late answer of an attempt that no longer settles the operation: kept as evidence for
    whoever resolves it, never as the outcome."""
    proposal = operation.proposal
    with transaction.atomic():
        audit_record(tenant_id=operation.tenant_id, kind="attempt.ignored", actor="dispatcher",
                     at=now, operation_id=operation.id, proposal_id=operation.proposal_id,
                     digest=proposal.digest,
                     details={"attempt": attempt, "outcome": outcome,
                              "error": audit_text(proposal, error),
                              "reason": "a newer attempt or a reconciliation settles it",
                              **audit_binding(proposal)})
