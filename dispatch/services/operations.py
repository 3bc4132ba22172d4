"""The one owner of an operation's state and of its attempt rows
(docs/design.md#outcomes, #dispatcher).

Every change of an operation's `state` or `attempts_made` is made here, by one conditional
UPDATE whose WHERE names the state the transition table allows the event from and the attempt
the change settles (`attempts_made = attempt`), with the attempt row's own conditional UPDATE
(`ended_at IS NULL`) beside it (`dispatch.store.operations`). Both row counts are read: if either
is not 1 the whole move rolls back and the caller hears `False`. So a late answer of an older
attempt never settles an operation that a newer attempt (a retry, a reconciliation) is working
on.

A move is planned, then applied: `protocols.outcomes` computes where it goes from what was
loaded (`outcome_step`), `operation_move` asks the runtime what that needs (`_facts`: the
hook's record, the resources' event, the agent who may hear of it, the masked texts),
`outcome_plan` computes everything the move writes, and `_apply` writes it in one transaction:
the move's own statement answers whether the agent holds a webhook endpoint, so the outcome
of an agent without one reads none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from dispatch.hooks import outcome_context
from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_binding, audit_record, audit_text, audit_values
from dispatch.services.notifications import outcome_hearer, outcome_write
from dispatch.services.pauses import attempt_paused
from dispatch.services.resources import resource_move
from dispatch.services.run_tree import execution_stopped
from dispatch.services.wakeups import wake_on_slot
from dispatch.store import operations as store
from protocols.audit_kinds import ATTEMPT_STARTED, ATTEMPT_UNCERTAIN
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.lifecycle import (
    OPERATION_LIFECYCLE,
    OperationEvent,
    OperationState,
    transition,
)
from protocols.outcomes import (
    Facts,
    Issued,
    Loaded,
    OutcomePlan,
    Step,
    outcome_plan,
    outcome_step,
)

OPERATION_CLAIMED = transition(OPERATION_LIFECYCLE, OPERATION_LIFECYCLE.initial,
                               OperationEvent.CLAIM)


class _Lost(Exception):
    """A guard did not hold: roll the move back."""


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
    written in the same transaction, and so are what the contract's outcome hook issues and the
    proposing agent's outcome notifications. Returns whether it moved; the caller's `operation`
    is updated when it did.

    Uncertainty is sticky (docs/design.md#outcomes, `protocols.outcomes`): once an attempt was
    uncertain, a definite failure moves the operation to `unknown` until an authoritative
    lookup proves the key absent (`absence_proven`, given with the retry that follows it).
    """
    proposal = operation.proposal  # loaded with the operation by every caller
    loaded = Loaded(id=operation.id, proposal_id=proposal.id, operation=proposal.operation,
                    state=OperationState(operation.state), uncertain=bool(operation.uncertain),
                    refs=tuple(proposal.resource_refs), binding=audit_binding(proposal))
    step = outcome_step(loaded, event, end_attempt=end_attempt, absence_proven=absence_proven)
    facts = _facts(operation, loaded, step, result=result, error=error, evidence=evidence,
                   now=now)
    plan = outcome_plan(loaded, step, facts, attempt=attempt, end_attempt=end_attempt,
                        error=error, result=result, evidence=evidence, details=details,
                        absence_proven=absence_proven)
    try:
        with transaction.atomic():
            moved = _apply(operation, plan, now=now, actor=actor, updated_at=updated_at)
    except _Lost:
        return False
    operation.state, operation.updated_at, operation.uncertain = plan.target, now, plan.uncertain
    if plan.answers:
        operation.result = plan.result
    if evidence is not None:
        operation.evidence = evidence
    if plan.settles and moved.in_run:
        # A slot of its run is free for the lane that waits longest for one (an action
        # outside any run frees none: no lane waits on it).
        wake_on_slot(operation.execution_id)
    return True


def _apply(operation: Operation, plan: OutcomePlan, *, now: datetime, actor: str,
           updated_at: datetime | None) -> store.Moved:
    """Inside the move's transaction: write `plan`, or raise `_Lost` when a guard did not hold
    (the operation moved on, or its attempt row was no longer open); what the move answered."""
    event = audit_values(tenant_id=operation.tenant_id, kind=plan.audit_kind, actor=actor,
                         at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id, digest=operation.proposal.digest,
                         details=plan.audit_details)
    notice = plan.notice
    moved = store.move(id=operation.id, source=plan.source, target=plan.target,
                       attempt=plan.attempt, was_uncertain=bool(operation.uncertain),
                       uncertain=plan.uncertain, now=now, answers=plan.answers,
                       result=plan.result, evidence=plan.evidence, updated_at=updated_at,
                       end=plan.end_attempt, error=plan.error, event=event,
                       hearer=None if notice is None else notice.hearer,
                       execution_id=operation.execution_id)
    if not moved.held:
        raise _Lost
    if plan.resource_event is not None:
        for ref in plan.moved:
            resource_move(ref=ref, event=plan.resource_event, now=now)
    if plan.issue is not None:
        plan.issue()
    if notice is not None and moved.heard:
        outcome_write(operation, notice, now)
    return moved


def _facts(operation: Operation, loaded: Loaded, step: Step, *, result: JSONObject | None,
           error: str, evidence: str | None, now: datetime) -> Facts:
    """What the plan of `step` needs from the runtime, asked only where it matters: the
    outcome hook's record, the resources' event when any moves, the agent who may hear of the
    target, the texts masked for the audit."""
    proposal = operation.proposal
    runtime = get_runtime()
    return Facts(
        issued=_issued(operation, step.target, result, now),
        resource_event=runtime.resource_event(operation.contract_fingerprint, step.target,
                                              step.event) if loaded.moved else None,
        hearer=outcome_hearer(proposal, step.target.value),
        audit_error=audit_text(proposal, error),
        audit_evidence=None if evidence is None else audit_text(proposal, evidence))


def _issued(operation: Operation, target: OperationState, result: JSONObject | None,
            now: datetime) -> Issued | None:
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
    issuance = hook(outcome_context(operation=operation, contract=contract, target=target,
                                    result=result, arguments=arguments, now=now))
    return None if issuance is None else (issuance.result, issuance.write)


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
    proposal = operation.proposal
    with transaction.atomic():  # its own, or a part of `attempt_next`'s
        if not store.hold(id=operation.id, attempt=number, now=now, retry_at=retry_at,
                          error=error):
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
    proposal = operation.proposal
    event = audit_values(tenant_id=operation.tenant_id, kind=ATTEMPT_STARTED,
                         actor="dispatcher", at=now, operation_id=operation.id,
                         proposal_id=operation.proposal_id, digest=proposal.digest,
                         details={**details, **audit_binding(proposal)})
    return store.start(id=operation.id, number=number, previous=previous, now=now, event=event)


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
