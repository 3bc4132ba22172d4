"""The one owner of executions and their journals, and the one drive loop
(docs/design.md#outcomes, #extensions).

An `Execution` is a run of an embedded runtime (the agent loop, a workflow) and the parent of its
tool operations; its `TranscriptEntry` rows are the run's journal. Every write of either is made
here: `execution_create`, `journal_append` and `execution_move` (the only writer of
`Execution.state`, by `protocols.lifecycle_runs.EXECUTION_LIFECYCLE`). `proposal_drive` takes one
proposal one step towards its outcome, for the agent loop, a nested call from inside a handler
and a workflow's dispatch step alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict, overload

from django.db import IntegrityError, transaction
from django.db.models import Max

from dispatch.models import ApprovalRequest, Execution, Operation, Principal, TranscriptEntry
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.runs import proposal_run
from dispatch.services.worker import operation_execute
from protocols.approvals import effective_approval_state
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import ApprovalState, OperationState, Outcome, settled_outcome, sources
from protocols.lifecycle_runs import EXECUTION_ENDED, EXECUTION_LIFECYCLE, ExecutionEvent

#: Rounds of "read the next seq, insert" before giving up; each lost round means another
#: writer's entry landed, so this bounds how many writers of one execution may race at once.
_APPEND_ROUNDS = 20


def execution_create(
    *, principal: Principal, adapter: str, now: datetime,
    adapter_config: JSONObject | None = None, adapter_fingerprint: str = "",
    deadline_at: datetime | None = None, parent: Execution | None = None,
    authority: JSONValue = None,
) -> Execution:
    """A new running execution of `principal`; `adapter` names the runtime that drives it,
    `adapter_config` is what rebuilds it and `adapter_fingerprint` pins that
    (docs/design.md#outcomes). `deadline_at`: when it times out (docs/workflows.md#deadlines).
    `parent`: the execution that opens this one (an agent step's run), whose tree it joins
    (docs/design.md#run-trees): refused `protocol_state_invalid` when the parent has ended.
    `authority`: what it declares (a workflow's `authority:`), None for nothing."""
    if parent is not None and parent.state in EXECUTION_ENDED:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     f"The run has ended ({parent.state}); nothing more starts inside it.",
                     execution_id=parent.id, state=parent.state)
    return Execution.objects.create(
        tenant_id=principal.tenant_id, principal=principal, adapter=adapter,
        adapter_config=adapter_config or {}, adapter_fingerprint=adapter_fingerprint,
        state=EXECUTION_LIFECYCLE.initial.value, deadline_at=deadline_at, created_at=now,
        updated_at=now, parent=parent,
        root_id=None if parent is None else (parent.root_id or parent.id),
        authority=authority)


def execution_declare(execution: Execution, *, authority: JSONValue) -> None:
    """Record the authority a run declares, on a run started before runs kept it (a resume):
    once, never over a declaration already kept (docs/design.md#run-trees)."""
    if execution.authority is None and authority is not None:
        Execution.objects.filter(id=execution.id, authority__isnull=True).update(
            authority=authority)
        execution.authority = authority


def execution_move(
    execution: Execution, event: ExecutionEvent, *, now: datetime, actor: str,
    final: str | None = None,
) -> bool:
    """THE one owner of `Execution.state`: move `execution` by `event` (`wait`: it now waits
    for a human or a worker; `finish`: it has finished; `time_out`, `cancel`: its deadline
    passed, it was cancelled: `dispatch.services.run_stops`), by `EXECUTION_LIFECYCLE`.

    One conditional UPDATE from every state the table allows `event` from: a finished
    execution stays finished, so a run that raced the finishing one and still thinks it waits
    does not reopen it (the journal's final entry is the record). `final` is the finished
    run's answer (kept as it was when None or empty). Returns whether it moved; the caller's
    `execution` is updated when it did. No audit row: a run's record is its journal, and
    `actor` (who moved it) is not stored; it is asked for so that every owner has one shape.
    """
    try:
        event = ExecutionEvent(event)
    except ValueError:
        raise ValueError(f"{event!r} is no move of an execution (wait, finish, time_out, "
                         "cancel): an execution "
                         "is running only from its creation") from None
    allowed = sources(EXECUTION_LIFECYCLE, event)
    targets = {EXECUTION_LIFECYCLE.transitions[(source, event)] for source in allowed}
    (target,) = targets  # every source of one event leads to one state
    fields: dict[str, Any] = {"state": target.value, "updated_at": now}
    if final:
        fields["final"] = final
    moved = Execution.objects.filter(
        id=execution.id, state__in=[source.value for source in allowed]).update(**fields)
    if moved == 1:
        execution.state, execution.updated_at = target.value, now
        if final:
            execution.final = final
    return moved == 1


class JournalEntry(TypedDict):
    """One entry of an execution's journal, as `journal_read` answers it."""

    seq: int
    kind: str
    call_id: str
    payload: JSONObject


def journal_read(*, execution_id: str) -> list[JournalEntry]:
    """The execution's journal in order: `seq`, `kind`, `call_id` and `payload` per entry."""
    return list(TranscriptEntry.objects.filter(execution_id=execution_id).order_by("seq")
                .values("seq", "kind", "call_id", "payload"))


def journal_append(
    *, execution_id: str, kind: str, call_id: str, payload: JSONObject, now: datetime
) -> JSONObject:
    """Append one entry to the execution's journal; answer the payload the journal holds for it.

    Safe under a concurrent writer of the same execution (a run resumed twice at once, a
    restarted loop beside a slow one). The unique (execution, seq) index decides between two
    writers that read the same last seq: the loser reads again and retries. The unique
    (execution, call_id, kind) index makes the first entry of a call the record: a writer that
    finds one answers with its payload instead of its own. An entry without a call id (the
    agent's final answer) is only ordered, never deduplicated.
    """
    for _ in range(_APPEND_ROUNDS):
        try:
            with transaction.atomic():
                last = TranscriptEntry.objects.filter(execution_id=execution_id).aggregate(
                    m=Max("seq"))["m"] or 0
                TranscriptEntry.objects.create(execution_id=execution_id, seq=last + 1,
                                               kind=kind, call_id=call_id, payload=payload,
                                               at=now)
                Execution.objects.filter(id=execution_id).update(updated_at=now)
        except IntegrityError:
            # Either index: another writer's entry committed first. Its entry for this call
            # is the record; a seq it took only means reading the next one again.
            if call_id:
                recorded = TranscriptEntry.objects.filter(
                    execution_id=execution_id, call_id=call_id, kind=kind,
                ).values_list("payload", flat=True).first()
                if recorded is not None:
                    return dict(recorded)
            continue
        return payload
    raise RuntimeError(f"could not journal {kind} {call_id!r} of execution {execution_id}: "
                       f"{_APPEND_ROUNDS} concurrent writers won first")


# --- the drive loop ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """The proposal waits for a human: its approval is pending and its window still open."""

    proposal_id: str
    approval_id: str


@dataclass(frozen=True)
class Running:
    """The operation is claimed and not settled yet (a worker runs it, or will)."""

    operation: Operation


@dataclass(frozen=True)
class Settled:
    """The operation has come to `outcome`; `operation` holds its result and evidence."""

    operation: Operation
    outcome: Outcome


@overload
def proposal_drive(
    *, principal: Principal, proposal_id: str, permit_id: str | None = ..., now: datetime,
    execute: bool, await_approval: Literal[False],
) -> Running | Settled: ...


@overload
def proposal_drive(
    *, principal: Principal, proposal_id: str, permit_id: str | None = ..., now: datetime,
    execute: bool, await_approval: bool = ...,
) -> Pending | Running | Settled: ...


def proposal_drive(
    *,
    principal: Principal,
    proposal_id: str,
    permit_id: str | None = None,
    now: datetime,
    execute: bool,
    await_approval: bool = True,
) -> Pending | Running | Settled:
    """Take the proposal one step further and say where it stands.

    Finds the operation already claimed for the proposal (by an earlier run, before a crash,
    or by a concurrent driver), or else asks the dispatcher to claim it (`permit_id`, or the
    permit minted for the proposal). `execute=True` runs a claimed operation's handler in
    this process; otherwise the claim enqueues it for a worker. While its approval is pending
    and unexpired the answer is `Pending`, unless `await_approval=False`: a caller that cannot
    wait for a human (a nested call) hears the dispatcher's `approval_pending` instead. Every
    refusal is the dispatcher's `Denial`, raised.
    """
    operation, ran = _operation_for(proposal_id), False
    if operation is None:
        if await_approval:
            approval = ApprovalRequest.objects.filter(proposal_id=proposal_id).first()
            if approval is not None and effective_approval_state(
                    approval.state, approval.expires_at, now) is ApprovalState.PENDING:
                return Pending(proposal_id=proposal_id, approval_id=approval.id)
        try:
            # Run here: the claim and attempt 1 are one transaction, then the handler and the
            # outcome (docs/design.md#write-transactions: two commits).
            operation = proposal_run(principal=principal, proposal_id=proposal_id,
                                     permit_id=permit_id, now=now) if execute else \
                proposal_dispatch(principal=principal, proposal_id=proposal_id,
                                  permit_id=permit_id, now=now)
            ran = execute
        except Denial:
            # A concurrent driver of this proposal may have claimed it first (the loser hears
            # `permit_claimed`): the operation it claimed is the answer.
            operation = _operation_for(proposal_id)
            if operation is None:
                raise
    if execute and not ran and operation.state == OperationState.CLAIMED:
        operation = operation_execute(operation_id=operation.id)
    outcome = settled_outcome(operation.state)
    if outcome is None:
        return Running(operation)
    return Settled(operation, outcome)


def _operation_for(proposal_id: str) -> Operation | None:
    return Operation.objects.filter(proposal_id=proposal_id).first()
