"""An execution's reads that the ORM cannot write: whether the proposal's execution is a workflow
run, which only then is woken on a decision (docs/workflows.md#waiting-steps,
docs/design.md#statement-layer), and a run-tree node share-locked inside a claim's or an
attempt's transaction on PostgreSQL (docs/design.md#run-trees).
"""

from __future__ import annotations

from typing import Any

from dispatch.store.sql import rows, statement

_IS_WORKFLOW = statement("execution.is_workflow", 'SELECT 1 FROM "dispatch_execution" '
                         'WHERE "id" = %(id)s AND "adapter" LIKE %(pattern)s')


def adapter_starts_with(*, id: str, prefix: str) -> bool:
    """Whether execution `id` exists and its adapter starts with `prefix` (a LIKE pattern's
    start: no `%` or `_` in it)."""
    return bool(rows(_IS_WORKFLOW, {"id": id, "pattern": f"{prefix}%"}))


#: One node of a run tree, share-locked: a stop's `execution_move` that committed first is read
#: here, and one that comes later waits for this commit. Not a hot statement: only an action of
#: an agent step or a sub-agent reads it (so it is not one of the hot path's `STATEMENTS`).
_NODE_SHARED = ('SELECT "id", "state", "principal_id", "parent_id", "authority", "deadline_at" '
                'FROM "dispatch_execution" WHERE "id" = %(id)s FOR SHARE')


def node_shared(*, id: str) -> tuple[Any, ...] | None:
    """PostgreSQL: execution `id`'s node (id, state, principal, parent, authority, deadline),
    its row share-locked until the transaction ends; None when it does not exist."""
    found = rows(_NODE_SHARED, {"id": id})
    return tuple(found[0]) if found else None
