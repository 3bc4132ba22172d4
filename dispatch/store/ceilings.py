"""The reads a claim's ceilings are checked on (docs/design.md#budgets, docs/workflows.md#ceilings,
docs/design.md#run-trees): an action's execution with its innermost open scope, and the actions
in flight (claimed and not settled) of a principal or of a run's whole tree.
`dispatch.services.ceilings` decides on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from dispatch.store.sql import is_postgres, rows, statement
from protocols.lifecycle import OperationState

_CLAIMED = OperationState.CLAIMED.value


class OpenScope(NamedTuple):
    """An execution's innermost open scope: what it may spend (docs/workflows.md#ceilings)."""

    id: str
    name: str
    calls: int
    attempts: int
    concurrency: int


class RunAndScope(NamedTuple):
    """An execution's state, parent, root and deadline (as the driver reads it: SQLite's is
    naive text), and its innermost open scope (None: none is open)."""

    state: str
    parent_id: str | None
    root_id: str | None
    deadline_at: datetime | str | None
    scope: OpenScope | None


#: The action's execution, its parent, and its innermost open scope (the newest opened: a child
#: opens after its parent): one statement for an action of a run, whatever the run has. Only
#: the action's principal's own execution: an execution id is the caller's word, and naming
#: another principal's run joins nothing of it (docs/design.md#run-trees).
_RUN_AND_SCOPE = statement(
    "execution.run_and_scope",
    'SELECT e."state", s."id", s."name", s."calls", s."attempts", s."concurrency", '
    'e."parent_id", e."root_id", e."deadline_at" '
    'FROM "dispatch_execution" e '
    'LEFT JOIN "dispatch_scope" s ON s."execution_id" = e."id" AND s."closed_at" IS NULL '
    'WHERE e."id" = %(execution_id)s AND e."principal_id" = %(principal_id)s '
    'ORDER BY s."opened_at" DESC, s."id" DESC LIMIT 1')
#: The same, the execution's row share-locked (PostgreSQL; on SQLite the claim holds the write
#: lock since BEGIN IMMEDIATE).
_RUN_AND_SCOPE_SHARED = _RUN_AND_SCOPE + " FOR SHARE OF e"
#: A principal's operations claimed and not settled but the one being claimed.
_IN_FLIGHT = statement(
    "operation.in_flight",
    'SELECT count(*) FROM "dispatch_operation" WHERE "principal_id" = %(principal_id)s '
    'AND "state" = %(state)s AND "id" <> %(operation_id)s')
#: The operations claimed and not settled, but the one being claimed, of a run's whole tree:
#: each an action of its execution's own principal (another principal naming one of the
#: tree's execution ids holds none of its slots).
_IN_FLIGHT_TREE = statement(
    "operation.in_flight_tree",
    'SELECT count(*) FROM "dispatch_operation" o JOIN "dispatch_execution" e '
    'ON e."id" = o."execution_id" AND e."principal_id" = o."principal_id" '
    'WHERE o."state" = %(state)s AND o."id" <> %(operation_id)s '
    'AND (e."id" = %(tree)s OR e."root_id" = %(tree)s)')


def run_and_scope(*, execution_id: str, principal_id: str,
                  lock: bool = False) -> RunAndScope | None:
    """Execution `execution_id` of `principal_id` with its innermost open scope; None when the
    principal has no such execution. `lock`: share-lock the execution's row, inside the
    caller's transaction, so that a stop's `execution_move` (which updates it) committed first
    is seen, and one that comes after waits for this transaction."""
    found = rows(_RUN_AND_SCOPE_SHARED if lock and is_postgres() else _RUN_AND_SCOPE,
                 {"execution_id": execution_id, "principal_id": principal_id})
    if not found:
        return None
    (state, scope_id, name, calls, attempts, concurrency, parent_id, root_id,
     deadline_at) = found[0]
    scope = None if scope_id is None else OpenScope(scope_id, name, calls, attempts,
                                                    concurrency)
    return RunAndScope(state, parent_id, root_id, deadline_at, scope)


def in_flight(*, principal_id: str, operation_id: str) -> int:
    """How many of the principal's operations are claimed and not settled, but
    `operation_id`."""
    [(count,)] = rows(_IN_FLIGHT, {"principal_id": principal_id, "state": _CLAIMED,
                                   "operation_id": operation_id})
    return int(count)


def in_flight_tree(*, tree: str, operation_id: str) -> int:
    """How many operations of the run tree rooted at execution `tree` are claimed and not
    settled, but `operation_id` ("": none is left out)."""
    [(count,)] = rows(_IN_FLIGHT_TREE, {"state": _CLAIMED, "operation_id": operation_id,
                                        "tree": tree})
    return int(count)
