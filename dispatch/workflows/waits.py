"""Waiting steps, parked in the store (docs/workflows.md#waiting-steps): `receive`, `approve`,
and the park of any step that waits on a decision or an input.

A waiting step raises `Wait(kind=...)`; the interpreter then parks it here, in the transaction
that moves the execution to `waiting` (`execution_move`): the journal records the step it waits
on (a `tool_call` entry under the step's key), a `WorkflowWait` row holds what it waits on, and
the park is audited (`workflow.parked`). No thread stays blocked: the approval resolver's
decision, or the input service, wakes the run (`dispatch.workflows.resume`).

`receive` and `approve` read their answer only from their own `WorkflowWait` row, written once
by `deliver_input`: a `receive` value is host data (JSON, never authority); an `approve` answer
is a Bool, never a permit. Only the approval resolver's decision, read from the approval
request by `request_approval`, is ever `Granted`.
"""

from __future__ import annotations

from django.db import transaction

from dispatch.failpoints import failpoint
from dispatch.models import ApprovalRequest, Execution, TranscriptEntry, WorkflowWait
from dispatch.services.audit import audit_record
from dispatch.services.ceilings import execution_slot_free
from dispatch.services.executions import execution_move
from dispatch.services.waits import wait_park
from dispatch.services.wakeups import wake_on_decision, wake_on_input
from dispatch.workflows.context import RunContext
from dispatch.workflows.parallel import after_park
from dispatch.workflows.values import Env, StepOutcome, Wait
from protocols.lifecycle import ApprovalState
from protocols.lifecycle_runs import ExecutionEvent
from protocols.workflow.ir import Approve, Receive


def receive(ctx: RunContext, step: Receive, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        wait = _delivered(ctx, key)
        if wait is None:
            ctx.record(key, "receive", "waiting", detail={"source": step.source})
            raise Wait(key, kind=WorkflowWait.Kind.RECEIVE)
        done = ctx.settle(key, StepOutcome(key, "receive", "received", detail={
            "source": step.source, "value": wait.value, "from": wait.delivered_by}))
    if step.bind is not None:
        env[step.bind] = done["value"]


def approve(ctx: RunContext, step: Approve, env: Env, key: str) -> None:
    done = ctx.replay(key)
    if done is None:
        wait = _delivered(ctx, key)
        if wait is None:
            ctx.record(key, "approve", "waiting", detail={"prompt": step.prompt})
            raise Wait(key, kind=WorkflowWait.Kind.APPROVE)
        answer = wait.value is True
        done = ctx.settle(key, StepOutcome(key, "approve", "yes" if answer else "no", detail={
            "prompt": step.prompt, "value": answer, "from": wait.delivered_by}))
    if step.bind is not None:
        env[step.bind] = done["value"] is True


def _delivered(ctx: RunContext, key: str) -> WorkflowWait | None:
    return WorkflowWait.objects.filter(execution_id=ctx.execution_id, step=key,
                                       delivered_at__isnull=False).first()


def park(ctx: RunContext, wait: Wait) -> None:
    """Move the execution to `waiting` and, for a waiting step of a kind, park it: journal the
    step it waits on, hold it in a `WorkflowWait` row (`parked`) and audit it, in one
    transaction. An approval decided between the step's read and this commit found nothing
    parked to wake: this wakes it now."""
    failpoint("workflow.before_park")
    with transaction.atomic():
        # The journal entry first: `journal_append` takes the entry, then the execution's row;
        # taking them in the other order here deadlocked against a concurrent lane's append
        # (PostgreSQL: each waiting on the other's lock).
        if wait.kind is not None:
            ctx.journal.put(wait.path, {"waits": wait.kind, "approval_id": wait.approval_id},
                            ctx.now, kind=TranscriptEntry.Kind.TOOL_CALL)
        execution_move(Execution.objects.get(id=ctx.execution_id), ExecutionEvent.WAIT,
                       now=ctx.now, actor=ctx.principal.name)
        if wait.kind is None:
            return
        parked = wait_park(tenant_id=ctx.principal.tenant_id, execution_id=ctx.execution_id,
                           step=wait.path, kind=wait.kind, approval_id=wait.approval_id,
                           now=ctx.now, actor=ctx.principal.name,
                           value={"focus": wait.focus or []} if wait.focus is not None else None)
        audit_record(tenant_id=ctx.principal.tenant_id, kind="workflow.parked",
                     actor=ctx.principal.name, at=ctx.now,
                     details={"execution_id": ctx.execution_id, "step": wait.path,
                              "waits": wait.kind, "approval_id": wait.approval_id or ""})
    if wait.approval_id is not None and ApprovalRequest.objects.filter(
            id=wait.approval_id).exclude(state=ApprovalState.PENDING).exists():
        wake_on_decision(wait.approval_id, execution_id=ctx.execution_id)

    if wait.kind == WorkflowWait.Kind.JOIN:  # lanes that ended while it parked
        after_park(ctx.execution_id, wait.path, ctx.now)
    if wait.kind == WorkflowWait.Kind.SLOT and execution_slot_free(ctx.execution_id):
        # An action settled between the refused claim and this park found nothing parked to
        # wake: wake it now (a lost wake-up would leave the lane waiting for ever).
        wake_on_input(parked.id)
