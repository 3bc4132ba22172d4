"""Handing work to a worker (docs/design.md#dispatcher): after commit, by task name, ids only.

Services never import the tasks that call them: a task is found in Celery's registry by its
name (registered when `dispatch.tasks` is loaded), so no import circle hides behind a lazy
import. `CELERY_TASK_ALWAYS_EAGER` still runs it in-process.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

EXECUTE = "dispatch.tasks.operation_execute"


def execute_on_commit(operation_id: str) -> None:
    """Run the handler of `operation_id` on a worker once the current transaction commits
    (at once outside a transaction): nothing runs unless the claim committed."""
    transaction.on_commit(lambda: execute_now(operation_id))


def execute_now(operation_id: str) -> None:
    current_app.tasks[EXECUTE].delay(operation_id)
