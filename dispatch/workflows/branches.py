"""The lane worker and the join's fallback (docs/workflows.md#concurrent-steps).

`run_branch` is what the Celery task `workflow_branch` runs: the execution rebuilt from its
source, resumed *focused* on one lane of a concurrent step (`dispatch.workflows.parallel`). Any
number of workers may run one lane at once: every step is journaled first-write-wins and every
service it calls is idempotent under a retry (a proposal per call id, one claim per permit), so
a lane never proposes or sends twice.

`sweep` (beat) is the fallback of a join: it delivers a `join` wait whose lanes all ended (a
lane's worker died between its end and the delivery) and enqueues again each lane of a join
parked longer than `LANE_LEASE` that has not ended and waits on nothing (its worker died).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from dispatch.models import Execution, WorkflowWait
from dispatch.workflows.journal import Journal
from dispatch.workflows.parallel import LaneDone, deliver_if_joined, enqueue, lane_key
from dispatch.workflows.resume import rebuild
from dispatch.workflows.runtime import run_workflow
from dispatch.workflows.values import WorkflowRefused
from protocols.lifecycle_runs import EXECUTION_ENDED

log = logging.getLogger(__name__)

#: A join parked this long with a lane that has not ended gets that lane enqueued again.
LANE_LEASE = timedelta(minutes=2)
SWEEP_LIMIT = 100


def run_branch(execution_id: str, focus: list[list[str]], *, now: datetime) -> str:
    """Run one lane of `execution_id` (`focus`: the lanes to enter, outermost first). Answers
    `ended` (the lane's end is journaled), `waiting` (it parks at a step of its own),
    `finished` (nothing left to run) or `refused`."""
    execution = Execution.objects.select_related("principal").filter(id=execution_id).first()
    if execution is None or execution.state in EXECUTION_ENDED:  # finished, timed out, cancelled
        return "finished"
    try:
        checked = rebuild(execution)
        run = run_workflow(checked, principal=execution.principal, execution_id=execution.id,
                           now=now, mode=execution.adapter_config.get("mode", "inline"),
                           focus=tuple((str(key), str(label)) for key, label in focus))
    except LaneDone:
        return "ended"
    except WorkflowRefused as refused:
        log.warning("cannot run lane %s of %s: %s", focus, execution_id, refused)
        return "refused"
    return run.state


def sweep(*, now: datetime, limit: int = SWEEP_LIMIT) -> int:
    """Deliver the joins whose lanes ended; enqueue lanes of old joins again. Answers how many
    joins it delivered or lanes it enqueued."""
    acted = 0
    joins = WorkflowWait.objects.filter(kind=WorkflowWait.Kind.JOIN,
                                        state=WorkflowWait.State.PARKED,
                                        delivered_at__isnull=True).order_by("parked_at")
    for wait in list(joins[:limit]):
        if deliver_if_joined(wait.execution_id, wait.step, now=now):
            acted += 1
            continue
        if wait.parked_at > now - LANE_LEASE or WorkflowWait.objects.filter(
                execution_id=wait.execution_id, state=WorkflowWait.State.PARKED).exclude(
                kind=WorkflowWait.Kind.JOIN).exists():
            continue  # young, or a lane waits on a human: its decision fans it out again
        journal = Journal(wait.execution_id)
        intent = journal.calls.get(wait.step) or {}
        for label in intent.get("lanes", []):
            if lane_key(wait.step, str(label)) not in journal.results:
                enqueue(wait.execution_id, [*intent.get("focus", []), [wait.step, label]])()
                acted += 1
    return acted
