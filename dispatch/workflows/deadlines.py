"""The step boundary of a run (docs/workflows.md#deadlines): before each step the interpreter asks
the store whether the run may go on. A run that was cancelled or timed out (by the beat, by an
operator, in another process) runs no further step; one whose deadline has passed is timed out
here. Either way its unsettled actions are stopped again (idempotent), so a proposal made by the
step that was in flight when the run ended is withdrawn too (`dispatch.services.run_stops`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from dispatch.models import Execution
from dispatch.services.run_stops import execution_stop_actions, execution_time_out
from dispatch.workflows.context import RunContext
from dispatch.workflows.values import RunState, WorkflowRun
from protocols.lifecycle_runs import EXECUTION_STOPPED, ExecutionState


def deadline_at(now: datetime, deadline_s: float | None) -> datetime | None:
    """When a run started at `now` with `deadline_s` times out; None without a deadline."""
    if deadline_s is None:
        return None
    if isinstance(deadline_s, bool) or not 0 < deadline_s <= 365 * 86400:
        raise ValueError(f"deadline_s is a number of seconds in (0, 1 year], not {deadline_s!r}")
    return now + timedelta(seconds=deadline_s)


class RunEnded(Exception):
    """The run ended `timed_out` or `cancelled`: no further step runs."""

    def __init__(self, ended: ExecutionState) -> None:
        self.ended = ended
        super().__init__(str(ended))


def step_boundary(ctx: RunContext) -> None:
    """Raise `RunEnded` if the run may not take another step; one read otherwise."""
    found = Execution.objects.filter(id=ctx.execution_id).values_list(
        "state", "deadline_at").first()
    if found is None:
        return
    state, deadline_at = found
    if state in EXECUTION_STOPPED:
        raise RunEnded(ExecutionState(state))
    if deadline_at is not None and deadline_at <= timezone.now():
        execution_time_out(execution_id=ctx.execution_id, now=timezone.now())
        now_state = Execution.objects.filter(id=ctx.execution_id).values_list(
            "state", flat=True).first()
        if now_state in EXECUTION_STOPPED:
            raise RunEnded(ExecutionState(now_state))


def ended_run(ctx: RunContext, ended: RunEnded) -> WorkflowRun:
    """What a run that ended at a step boundary answers, after stopping its actions again."""
    execution = Execution.objects.select_related("principal").get(id=ctx.execution_id)
    reason = ("the run's deadline passed" if ended.ended is ExecutionState.TIMED_OUT
              else "the run was cancelled")
    execution_stop_actions(execution, actor=execution.principal, now=timezone.now(),
                           reason=reason)
    state: RunState = "timed_out" if ended.ended is ExecutionState.TIMED_OUT else "cancelled"
    return WorkflowRun(ctx.execution_id, ctx.workflow.name, state, tuple(ctx.outcomes))
