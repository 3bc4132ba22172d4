"""The one owner of `WorkflowWait.state` (docs/workflows.md#waiting-steps): `wait_park` creates
or parks again a workflow's waiting step, `wait_move` moves it by
`protocols.lifecycle_runs.WAIT_LIFECYCLE`, each with one conditional write."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q

from dispatch.models import WorkflowWait
from protocols.jsontypes import JSONValue
from protocols.lifecycle import sources
from protocols.lifecycle_runs import WAIT_LIFECYCLE, WaitEvent


def wait_park(*, tenant_id: str, execution_id: str, step: str, kind: str,
              approval_id: str | None, now: datetime, actor: str,
              value: JSONValue = None) -> WorkflowWait:
    """The step's wait, `parked`: made in the table's initial state, or parked again when a
    resumed run still waits at it. `value`: what a `slot` wait keeps (the lanes to enter to
    reach its step again)."""
    wait, made = WorkflowWait.objects.get_or_create(
        execution_id=execution_id, step=step,
        defaults={"tenant_id": tenant_id, "kind": kind, "approval_id": approval_id,
                  "state": WAIT_LIFECYCLE.initial.value, "parked_at": now, "value": value})
    if not made and wait.state != WAIT_LIFECYCLE.initial:
        wait_move(wait, WaitEvent.PARK, now=now, actor=actor)
    return wait


def wait_move(wait: WorkflowWait, event: WaitEvent, *, now: datetime, actor: str,
              note: str = "") -> bool:
    """THE one owner of `WorkflowWait.state`: move `wait` by `event`, with one conditional
    UPDATE from every state the table allows it from. `claim` takes a parked step (of two
    wake-ups, one moves it); `reclaim` takes a step still claimed as `wait` was read (its
    `claimed_at`), for a resumer that died; `park`, `resume` and `refuse` end a resumption.
    Returns whether it moved; `wait` is updated when it did. `actor` is not stored (the audit
    records who resumed); `note` is a refusal's reason."""
    event = WaitEvent(event)
    allowed = sources(WAIT_LIFECYCLE, event)
    (target,) = {WAIT_LIFECYCLE.transitions[(source, event)] for source in allowed}
    where = Q(id=wait.id, state__in=[s.value for s in allowed])
    fields: dict[str, Any] = {"state": target.value}
    if event is WaitEvent.RECLAIM:
        where &= Q(claimed_at=wait.claimed_at)
    if event in (WaitEvent.CLAIM, WaitEvent.RECLAIM):
        fields["claimed_at"] = now
    if event is WaitEvent.PARK:
        fields["claimed_at"] = None
    if note:
        fields["note"] = note
    moved = WorkflowWait.objects.filter(where).update(**fields) == 1
    if moved:
        for name, value in fields.items():
            setattr(wait, name, value)
    return moved
