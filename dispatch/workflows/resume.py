"""Resuming parked executions (docs/workflows.md#waiting-steps): wake-ups, the polling
fallback, and the input service of `receive` and `approve`.

A wake-up names an approval (its decision committed) or one parked step (its input
committed). Each parked step is claimed with one conditional UPDATE (`parked` → `resuming`):
of two wake-ups, in two processes, exactly one resumes the run; the other finds nothing
parked. The claimer rebuilds the workflow from the source the execution was started with,
checks it again against the current contracts and resumes it from its journal
(`run_workflow(execution_id=...)`), so nothing of the parked state lives in a process.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from dispatch.failpoints import failpoint
from dispatch.models import Execution, Principal, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.services.ceilings import execution_slot_free
from dispatch.services.waits import wait_move
from dispatch.services.wakeups import wake_on_input
from dispatch.workflows.parallel import LaneDone
from dispatch.workflows.runtime import run_workflow
from dispatch.workflows.values import WorkflowRefused, WorkflowRun
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONValue
from protocols.lifecycle import ApprovalState
from protocols.lifecycle_runs import WaitEvent
from protocols.workflow import CheckedWorkflow, check_source

log = logging.getLogger(__name__)

#: A claim older than this is taken to have died with its process (a worker killed while it
#: resumed); the fallback claims the step again. Resuming twice is harmless (the journal).
RESUME_LEASE = timedelta(minutes=5)
#: Parked steps the fallback looks at per sweep.
SWEEP_LIMIT = 100

_P, _R = WorkflowWait.State.PARKED, WorkflowWait.State.RESUMING


def wake(*, approval_id: str | None = None, wait_id: str | None = None,
         now: datetime) -> list[WorkflowRun]:
    """Resume every execution parked on `approval_id`'s decision, or at `wait_id`; the runs
    this wake-up resumed (none when another wake-up claimed them first)."""
    waits = WorkflowWait.objects.filter(state=_P)
    waits = waits.filter(approval_id=approval_id) if approval_id else waits.filter(id=wait_id)
    runs = []
    for pending in list(waits.values_list("id", flat=True)):
        run = resume_wait(pending, now=now)
        if run is not None:
            runs.append(run)
    return runs


def resume_wait(wait_id: str, *, now: datetime, stale: bool = False) -> WorkflowRun | None:
    """Claim the parked step `wait_id` and resume its execution; None when this did not claim
    it (another wake-up did, or it is no longer parked). `stale`: claim it in `resuming` as it
    was read instead (the fallback, for a resumer that died)."""
    row = WorkflowWait.objects.select_related("execution__principal").filter(id=wait_id).first()
    if row is None or not wait_move(row, WaitEvent.RECLAIM if stale else WaitEvent.CLAIM,
                                    now=now, actor="system"):
        return None
    failpoint("workflow.resume_claimed")
    execution = row.execution
    try:
        checked = rebuild(execution)
        with transaction.atomic():
            audit_record(tenant_id=execution.tenant_id, kind="workflow.resumed",
                         actor="system", at=now, details={
                             "execution_id": execution.id, "step": row.step, "waits": row.kind,
                             "approval_id": row.approval_id or ""})
        # A lane waiting for a slot runs alone, as its lane task would; anything else resumes
        # the whole run.
        focus = _focus_of(row)
        try:
            run = run_workflow(checked, principal=execution.principal,
                               execution_id=execution.id, now=now, focus=focus,
                               mode=execution.adapter_config.get("mode", "inline"))
        except LaneDone:
            run = None
    except WorkflowRefused as refused:
        wait_move(row, WaitEvent.REFUSE, now=now, actor="system",
                  note=f"{refused.code}: {refused}"[:2000])
        log.warning("cannot resume %s at %s: %s", execution.id, row.step, refused)
        return None
    # A run that passed the step leaves it resumed; one that parks it again made it `parked`.
    wait_move(row, WaitEvent.RESUME, now=now, actor="system")
    return run


def _focus_of(wait: WorkflowWait) -> tuple[tuple[str, str], ...]:
    """The lanes a `slot` wait's step is reached through (none: it is the run's own step)."""
    kept = wait.value if wait.kind == WorkflowWait.Kind.SLOT else None
    focus = kept.get("focus") if isinstance(kept, dict) else None
    return tuple((str(key), str(label)) for key, label in focus) if focus else ()


def resume_stale(*, now: datetime, limit: int = SWEEP_LIMIT) -> int:
    """The polling fallback (beat): resume parked steps whose approval was decided or whose
    input arrived, and steps whose resumer died. Bounded per sweep; a step another wake-up
    claims meanwhile is skipped. Answers how many runs it resumed."""
    decided = WorkflowWait.objects.filter(
        Q(state=_P) & (Q(approval__isnull=False) & ~Q(approval__state=ApprovalState.PENDING)
                       | Q(delivered_at__isnull=False)))
    resumed = 0
    for wait_id in list(decided.order_by("parked_at").values_list("id", flat=True)[:limit]):
        resumed += resume_wait(wait_id, now=now) is not None
    # A lane waiting for a slot whose wake-up was lost (its task, or the process that settled
    # an action, died): resumed only while its run has a slot free.
    # One per run, its oldest, so that a run full of waiting lanes hides no other run's.
    slots = WorkflowWait.objects.filter(state=_P, kind=WorkflowWait.Kind.SLOT)
    runs = list(slots.order_by().values_list("execution_id", flat=True).distinct()[:limit])
    for execution_id in runs:
        if execution_slot_free(execution_id):
            oldest = slots.filter(execution_id=execution_id).order_by("parked_at", "id").first()
            if oldest is not None:
                resumed += resume_wait(oldest.id, now=now) is not None
    stuck = WorkflowWait.objects.filter(state=_R, claimed_at__lt=now - RESUME_LEASE)
    for wait_id in list(stuck.values_list("id", flat=True)[:limit]):
        resumed += resume_wait(wait_id, now=now, stale=True) is not None
    return resumed


def rebuild(execution: Execution) -> CheckedWorkflow:
    """The run's workflow, checked again from the source it was started with against the
    contracts registered now (a resumption or a lane never runs an IR the store could not
    re-derive)."""
    config = execution.adapter_config
    source, filename = config.get("source"), config.get("filename")
    if not isinstance(source, str) or not isinstance(filename, str):
        raise WorkflowRefused(DenialCode.EXECUTION_MISMATCH, "the execution was started "
                              "without its workflow's source: its caller resumes it")
    runtime = get_runtime()
    checked = check_source(source, runtime.registry, filename=filename,
                           kinds=runtime.resource_protocols)
    if not isinstance(checked, CheckedWorkflow):
        raise WorkflowRefused(DenialCode.CONTRACT_MISMATCH, "the workflow no longer checks "
                              "against the registered contracts")
    return checked


# --- input: `POST executions/{id}/input/` ---------------------------------------------------------


def deliver_input(*, principal: Principal, execution_id: object, value: JSONValue,
                  step: object = None, now: datetime) -> WorkflowWait:
    """Give the `receive` or `approve` step the execution is parked at its answer, once; the
    run resumes after the commit. A `receive` takes any JSON from the execution's own principal
    (the host) or a human operator of its tenant; an `approve` takes a bool from a human
    operator other than the execution's principal. An approval's decision is never an input:
    only the approval resolver decides it (`protocol_state_invalid`)."""
    if not isinstance(execution_id, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/execution_id", "message": "must be a string"}])
    if step is not None and not isinstance(step, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/step", "message": "must be a step key such as steps[2]"}])
    execution = Execution.objects.filter(id=execution_id, tenant_id=principal.tenant_id).first()
    own = execution is not None and execution.principal_id == principal.id
    if execution is None or not (own or principal.kind == Principal.Kind.HUMAN):
        raise Denial(DenialCode.NOT_FOUND)
    parked = WorkflowWait.objects.filter(execution_id=execution.id, state=_P).exclude(
        kind=WorkflowWait.Kind.JOIN)  # a join is delivered by its lanes, never as input
    if step is not None:
        parked = parked.filter(step=step)
    wait = parked.order_by("-parked_at").first()
    if wait is None:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     reason="the execution is not parked at a step that takes input")
    if wait.kind == WorkflowWait.Kind.APPROVAL:
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID, step=wait.step,
                     reason="the step waits for an approval: only the approval resolver "
                            "decides it (POST approvals/{id}/decision/)")
    if wait.kind == WorkflowWait.Kind.APPROVE:
        require_role(principal, "operator")
        if own:
            raise Denial(DenialCode.APPROVER_IS_REQUESTER)
        if not isinstance(value, bool):
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": "/value", "message": "an `approve` step takes true or false"}])
    elif not own:
        require_role(principal, "operator")
    with transaction.atomic():
        if not WorkflowWait.objects.filter(id=wait.id, delivered_at__isnull=True).update(
                value=value, delivered_by=principal.name, delivered_at=now):
            raise Denial(DenialCode.PROTOCOL_STATE_INVALID, step=wait.step,
                         reason="the step has its input already")
        audit_record(tenant_id=execution.tenant_id, kind="workflow.input", actor=principal.name,
                     at=now, details={"execution_id": execution.id, "step": wait.step,
                                      "waits": wait.kind})
        wake_on_input(wait.id)
    wait.refresh_from_db()
    return wait
