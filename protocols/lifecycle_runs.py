"""The transition tables of runs (docs/design.md#outcomes, docs/workflows.md#deadlines): an
execution of an embedded runtime and a workflow's parked step. Moved here from
`protocols.lifecycle`, which keeps the tables of actions (operation, approval, permit) and
resources; `transition` and `sources` there move these too."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from protocols.lifecycle import Protocol


class ExecutionState(StrEnum):
    """A run of an embedded runtime (an agent loop, a workflow): running from its creation,
    waiting for a human or a worker, then finished, timed out (its `deadline_s` passed) or
    cancelled (`POST executions/{id}/cancel/`). An ended run stays ended."""

    RUNNING = "running"
    WAITING = "waiting"
    FINISHED = "finished"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class ExecutionEvent(StrEnum):
    WAIT = "wait"
    FINISH = "finish"
    TIME_OUT = "time_out"  # the run's deadline passed (the beat, or a step boundary)
    CANCEL = "cancel"      # the run's principal or an operator cancelled it


class WaitState(StrEnum):
    """A parked workflow step (docs/workflows.md#waiting-steps): parked until a wake-up claims
    it (resuming); resumed once the run passed it, parked again if it still waits; refused
    when the store cannot resume it (its caller can)."""

    PARKED = "parked"
    RESUMING = "resuming"
    RESUMED = "resumed"
    REFUSED = "refused"


class WaitEvent(StrEnum):
    CLAIM = "claim"      # a wake-up takes a parked step
    RECLAIM = "reclaim"  # the fallback takes a step whose resumer died
    PARK = "park"        # the run still waits at the step
    RESUME = "resume"    # the run passed the step
    REFUSE = "refuse"    # the store cannot resume the run


X, XE = ExecutionState, ExecutionEvent
#: A running or waiting run waits again (each resume that stops short), finishes, times out or
#: is cancelled; nothing reopens an ended one, and only its creation makes one running.
EXECUTION_LIFECYCLE: Final = Protocol[ExecutionState, ExecutionEvent](
    name="execution",
    initial=X.RUNNING,
    transitions={
        (X.RUNNING, XE.WAIT): X.WAITING,
        (X.WAITING, XE.WAIT): X.WAITING,
        (X.RUNNING, XE.FINISH): X.FINISHED,
        (X.WAITING, XE.FINISH): X.FINISHED,
        (X.RUNNING, XE.TIME_OUT): X.TIMED_OUT,
        (X.WAITING, XE.TIME_OUT): X.TIMED_OUT,
        (X.RUNNING, XE.CANCEL): X.CANCELLED,
        (X.WAITING, XE.CANCEL): X.CANCELLED,
    },
    final=frozenset({X.FINISHED, X.TIMED_OUT, X.CANCELLED}),
)
#: The states a run has ended in: no step runs after them.
EXECUTION_ENDED: Final = EXECUTION_LIFECYCLE.final
#: The ends of a run that stop its actions too (docs/workflows.md#deadlines): a timed-out or
#: cancelled run's issued actions are refused; a finished run's approved actions still run.
EXECUTION_STOPPED: Final = frozenset({X.TIMED_OUT, X.CANCELLED})

W, WE = WaitState, WaitEvent
#: Of two wake-ups only one claims a parked step (the conditional UPDATE from `parked`); a run
#: that passed the step leaves it resumed for good.
WAIT_LIFECYCLE: Final = Protocol[WaitState, WaitEvent](
    name="workflow_wait",
    initial=W.PARKED,
    transitions={
        (W.PARKED, WE.CLAIM): W.RESUMING,
        (W.RESUMING, WE.RECLAIM): W.RESUMING,
        (W.RESUMING, WE.PARK): W.PARKED,
        (W.REFUSED, WE.PARK): W.PARKED,
        (W.RESUMING, WE.RESUME): W.RESUMED,
        (W.RESUMING, WE.REFUSE): W.REFUSED,
    },
    final=frozenset({W.RESUMED}),
)
