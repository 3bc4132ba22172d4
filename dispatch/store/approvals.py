"""An approval request's row (docs/design.md#approvals): the decider's lock and the one
conditional UPDATE that `dispatch.services.approvals.approval_move`, the owner of its state,
runs.

The move names the state the request was loaded in and bounds it by the request's expiry: of
two deciders exactly one finds the request pending, before its expiry; an expiry moves only a
request past it.
"""

from __future__ import annotations

from datetime import datetime

from dispatch.models import ApprovalRequest
from dispatch.store.sql import is_postgres, rows, run, statement, value
from protocols.lifecycle import ApprovalState

_LOCK = statement(
    "approval.lock", 'SELECT "state" FROM "dispatch_approvalrequest" WHERE "id" = %(id)s')
_LOCK_FOR_UPDATE = _LOCK + " FOR UPDATE"
#: From the state the request was loaded in: only before its expiry unless `after_expiry`, only
#: past it unless `before_expiry` (a decision: before only; an expiry: after only; a
#: revocation: whenever).
_MOVE = statement(
    "approval.move",
    'UPDATE "dispatch_approvalrequest" SET "state" = %(target)s '
    'WHERE "id" = %(id)s AND "state" = %(source)s '
    'AND (%(after_expiry)s OR "expires_at" > %(now)s) '
    'AND (%(before_expiry)s OR "expires_at" <= %(now)s)')


def lock(*, id: str) -> str | None:
    """Lock request `id`'s row for the caller's transaction (PostgreSQL: FOR UPDATE; SQLite
    holds the write lock since BEGIN IMMEDIATE) and answer its state, read under the lock;
    None when there is no such request."""
    found = rows(_LOCK_FOR_UPDATE if is_postgres() else _LOCK, {"id": id})
    return str(found[0][0]) if found else None


def move(*, id: str, source: ApprovalState, target: ApprovalState, now: datetime,
         before_expiry: bool, after_expiry: bool) -> bool:
    """Move request `id` from `source` to `target` at `now`, allowed before its expiry
    (`before_expiry`) and/or past it (`after_expiry`); whether it moved."""
    return run(_MOVE, {"id": id, "source": source.value, "target": target.value,
                       "now": value(ApprovalRequest, "expires_at", now),
                       "before_expiry": before_expiry, "after_expiry": after_expiry}) == 1
