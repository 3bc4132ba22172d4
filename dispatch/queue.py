"""Handing work to a worker (docs/design.md#dispatcher): after commit, by task name, ids only.

Services never import the tasks that call them: a task is found in Celery's registry by its
name (registered when `dispatch.tasks` is loaded), so no import circle hides behind a lazy
import. `CELERY_TASK_ALWAYS_EAGER` still runs it in-process. A wrong name fails
tests/unit/test_task_names.py, which checks every name looked up and every beat entry.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

from dispatch.failpoints import failpoint

EXECUTE = "dispatch.tasks.operation_execute"


def execute_on_commit(operation_id: str) -> None:
    """Run the handler of `operation_id` on a worker once the current transaction commits
    (at once outside a transaction): nothing runs unless the claim committed."""
    transaction.on_commit(lambda: execute_now(operation_id))


def execute_now(operation_id: str) -> None:
    current_app.tasks[EXECUTE].delay(operation_id)


RUN = "dispatch.tasks.proposal_run"


def run_on_commit(proposal_id: str, principal_id: str) -> None:
    """Claim and run an approved `dispatch_on_approval` proposal on a worker once the current
    transaction (the grant's) commits: the worker's claim and attempt 1 are one transaction
    (docs/design.md#write-transactions). A message lost before the claim leaves an issued
    permit, which reconciliation hands over again (`run_now`); so does a broker that refuses the
    message, which is logged, not raised: the human's decision has committed and is answered."""
    transaction.on_commit(lambda: run_now(proposal_id, principal_id), robust=True)


def run_now(proposal_id: str, principal_id: str) -> None:
    current_app.tasks[RUN].delay(proposal_id, principal_id)


NOTIFY = "dispatch.tasks.notification_deliver"


def notify_on_commit(notification_ids: list[str]) -> None:
    """Deliver these outbox rows on a worker once the current transaction commits. A broker
    that refuses the message loses nothing: the beat sweep finds every due row
    (docs/design.md#notifications)."""
    transaction.on_commit(lambda: _notify_all(notification_ids), robust=True)


def _notify_all(notification_ids: list[str]) -> None:
    failpoint("notify.before_enqueue")
    for notification_id in notification_ids:
        notify_later(notification_id, 0)


def notify_later(notification_id: str, seconds: float) -> None:
    """Deliver one outbox row on a worker in `seconds` (a retry's backoff)."""
    task = current_app.tasks[NOTIFY]
    if seconds > 0:
        task.apply_async(args=(notification_id,), countdown=seconds)
    else:
        task.apply_async(args=(notification_id,))
