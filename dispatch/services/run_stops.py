"""Deadlines and cancellation of runs (docs/workflows.md#deadlines).

An execution may carry a deadline (`deadline_at`, from the run's `deadline_s`). When it passes
(the beat's `executions_expire`, or the run itself at its next step boundary) the run ends
`timed_out`; `execution_cancel` (`POST executions/{id}/cancel/`) ends it `cancelled`. Either way,
in this order:

1. the execution moves to its end state (its one owner, `execution_move`) with the audit event
   `execution.timed_out` / `execution.cancelled`, in one transaction: from then on no step of it
   runs (the interpreter checks at each step boundary);
2. each of its actions is stopped as `dispatch.services.cancellation` stops one: a proposal not
   yet claimed is withdrawn (its pending approval revoked, its permit with it); a claimed one
   with no attempt open ends without effect; an attempt in flight is asked to stop through its
   handler's context and its own answer is the outcome (`unknown` when the effect may have
   happened). A consumed permit is never freed for another action;
3. the run's scopes close, giving back what they did not use (`dispatch.services.ceilings`).

Steps 2 and 3 are idempotent (`execution_stop_actions`): the step boundary that finds the run
ended runs them again, so a proposal made by a step that was in flight when the run ended is
withdrawn too.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from dispatch.models import Delegation, Execution, Operation, Principal, Proposal
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.ceilings import scopes_close_for
from dispatch.services.delegations import RUN_ENDED, delegation_end
from dispatch.services.executions import execution_move
from dispatch.services.run_tree import tree_of
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import OperationState
from protocols.lifecycle_runs import EXECUTION_ENDED, ExecutionEvent, ExecutionState
from protocols.roles import Role

log = logging.getLogger(__name__)

#: Executions past their deadline the beat ends per sweep.
SWEEP_LIMIT = 50
_KIND = {ExecutionEvent.TIME_OUT: "execution.timed_out",
         ExecutionEvent.CANCEL: "execution.cancelled"}
_LIVE = [ExecutionState.RUNNING.value, ExecutionState.WAITING.value]


def execution_cancel(
    *, actor: Principal, execution_id: object, now: datetime, reason: str = "",
) -> Execution:
    """Cancel a run: the principal that runs it, or a human operator (or admin) of its tenant.
    `not_found` for another tenant's run, `protocol_state_invalid` for one that already ended.
    Returns the execution, `cancelled`."""
    if not isinstance(execution_id, str):
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/execution_id", "message": "must be a string"}])
    execution = Execution.objects.select_related("principal").filter(
        id=execution_id, tenant_id=actor.tenant_id).first()
    if execution is None or not (execution.principal_id == actor.id
                                 or actor.kind == Principal.Kind.HUMAN):
        raise Denial(DenialCode.NOT_FOUND)
    if execution.principal_id != actor.id:
        require_role(actor, Role.OPERATOR)
    if not _end(execution, ExecutionEvent.CANCEL, actor=actor.name, now=now, reason=reason):
        raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                     f"The run has already ended '{execution.state}'.", state=execution.state)
    execution_stop_actions(execution, actor=actor, now=now,
                           reason=reason or "the run was cancelled")
    return execution


def execution_time_out(*, execution_id: str, now: datetime) -> bool:
    """End the run `timed_out` if its deadline has passed by `now` and it has not ended; stop
    its actions either way once it has timed out. False when it is not (or no longer) due."""
    execution = Execution.objects.select_related("principal").filter(id=execution_id).first()
    if execution is None or execution.deadline_at is None or execution.deadline_at > now:
        return False
    moved = _end(execution, ExecutionEvent.TIME_OUT, actor="system", now=now,
                 reason="the run's deadline passed")
    if moved or execution.state == ExecutionState.TIMED_OUT:
        execution_stop_actions(execution, actor=execution.principal, now=now,
                               reason="the run's deadline passed")
    return moved


def executions_expire(*, now: datetime, limit: int = SWEEP_LIMIT) -> int:
    """The beat: time out every run past its deadline; how many it ended."""
    due = list(Execution.objects.filter(state__in=_LIVE, deadline_at__lte=now)
               .order_by("deadline_at").values_list("id", flat=True)[:limit])
    return sum(execution_time_out(execution_id=execution_id, now=now) for execution_id in due)


def _end(execution: Execution, event: ExecutionEvent, *, actor: str, now: datetime,
         reason: str) -> bool:
    with transaction.atomic():
        moved = execution_move(execution, event, now=now, actor=actor,
                               final=f"{_KIND[event].split('.')[1]}: {reason}"[:1000])
        if moved:
            audit_record(tenant_id=execution.tenant_id, kind=_KIND[event], actor=actor, at=now,
                         details={"execution_id": execution.id, "reason": reason[:1000],
                                  **({"deadline_at": execution.deadline_at.isoformat()}
                                     if execution.deadline_at else {})})
    if not moved:
        execution.refresh_from_db(fields=["state", "final"])
    return moved


def execution_stop_actions(execution: Execution, *, actor: Principal, now: datetime,
                           reason: str) -> int:
    """Stop the whole tree of an ended run (docs/design.md#run-trees) in one pass; how many
    actions this stopped. Every live execution below it (an agent step's loop, a sub-agent)
    ends with it; every action of any of them that is not settled is stopped; every open
    delegation in it ends (its child grant revoked with the unclaimed permits resting on it);
    every scope closes. Idempotent: an action already cancelled or settled, an execution or a
    delegation already ended, is left as it is. `actor` is who the cancellations are recorded
    as (the canceller, or the run's principal for a deadline)."""
    if execution.state not in EXECUTION_ENDED:
        raise ValueError(f"execution {execution.id} has not ended: its actions are its own")
    tree = tree_of(execution.id)
    event = (ExecutionEvent.TIME_OUT if execution.state == ExecutionState.TIMED_OUT
             else ExecutionEvent.CANCEL)
    for child in Execution.objects.filter(id__in=tree[1:], state__in=_LIVE).order_by(
            "created_at", "id"):
        _end(child, event, actor=actor.name, now=now, reason=f"its run ended: {reason}")
    for delegation in Delegation.objects.select_related("grant").filter(
            execution_id__in=tree, ended_at__isnull=True).order_by("started_at", "id"):
        delegation_end(delegation=delegation, reason=RUN_ENDED, actor=actor.name, now=now)
    stopped = 0
    proposals = Proposal.objects.filter(execution_id__in=tree, cancelled_at__isnull=True)
    claimed = Operation.objects.filter(execution_id__in=tree, state=OperationState.CLAIMED)
    ids = set(proposals.values_list("id", flat=True)) | set(
        claimed.values_list("proposal_id", flat=True))
    for proposal_id in sorted(ids):
        if Operation.objects.filter(proposal_id=proposal_id).exclude(
                state=OperationState.CLAIMED).exists():
            continue  # settled: nothing to stop
        try:
            proposal_cancel(actor=actor, proposal_id=proposal_id, now=now, reason=reason)
        except Denial as denial:  # settled or cancelled meanwhile: what happened stands
            log.info("run %s: action %s not stopped: %s", execution.id, proposal_id, denial)
            continue
        stopped += 1
    for member in tree:
        scopes_close_for(execution_id=member, now=now, reason=f"the run ended: {reason}")
    return stopped
