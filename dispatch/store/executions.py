"""An execution's one read on a decision's path (docs/workflows.md#waiting-steps,
docs/design.md#statement-layer): whether the proposal's execution is a workflow run, which
only then is woken.
"""

from __future__ import annotations

from dispatch.store.sql import rows, statement

_IS_WORKFLOW = statement("execution.is_workflow", 'SELECT 1 FROM "dispatch_execution" '
                         'WHERE "id" = %(id)s AND "adapter" LIKE %(pattern)s')


def adapter_starts_with(*, id: str, prefix: str) -> bool:
    """Whether execution `id` exists and its adapter starts with `prefix` (a LIKE pattern's
    start: no `%` or `_` in it)."""
    return bool(rows(_IS_WORKFLOW, {"id": id, "pattern": f"{prefix}%"}))
