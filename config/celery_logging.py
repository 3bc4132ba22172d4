"""Celery's side of the JSON logs (docs/design.md#running), connected by config/celery.py.

- `setup_logging`: Celery configures nothing of its own; the worker and beat use settings.LOGGING
  (config/logging.py), at the level of their `--loglevel`.
- `celeryd_after_setup`: under `LOG_FORMAT=json` the worker's start-up banner (plain text on
  stdout) is not printed; its facts are logged as one JSON line instead.
- `before_task_publish`: a task published while a request runs carries the request's id.
- `task_prerun` / `task_postrun`: each task starts and ends with a clean log context holding its
  task id and the request id; `operation_execute` binds its operation id (and the worker's
  service its proposal id, dispatch.services.worker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

import structlog
from celery.signals import (
    before_task_publish,
    celeryd_after_setup,
    setup_logging,
    task_postrun,
    task_prerun,
)

from config.middleware import REQUEST_ID
from dispatch.observability.context import bind_ids, clear_ids

log = logging.getLogger("console.worker")
HEADER = "console_request_id"


@setup_logging.connect(weak=False)
def use_django_logging(loglevel: int | str | None = None, **_: Any) -> None:
    from django.conf import settings

    from config.logging import apply

    apply(settings.LOGGING, loglevel)


@celeryd_after_setup.connect(weak=False)
def no_text_banner(sender: str, instance: Any, conf: Any, **_: Any) -> None:
    from django.conf import settings

    if settings.LOG_FORMAT == "json":
        instance.quiet = True
        # The shutdown notices ("worker: Warm shutdown (MainProcess)") are written straight to
        # the file descriptor from the signal handler by `celery.apps.worker.safe_say`: the same
        # words, as one JSON line, written the same way (no lock taken in a signal handler).
        import celery.apps.worker

        celery.apps.worker.safe_say = _say_as_json  # type: ignore[attr-defined]
        log.info("worker %s starting, concurrency %s", sender, instance.concurrency)


def _say_as_json(msg: str, f: Any = sys.__stderr__) -> None:
    line = json.dumps({"event": msg.strip(), "level": "warning", "logger": "celery.apps.worker",
                       "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z")},
                      sort_keys=True)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        os.write(f.fileno(), f"{line}\n".encode())


@before_task_publish.connect(weak=False)
def carry_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    if headers is not None and request_id:
        headers[HEADER] = request_id


@task_prerun.connect(weak=False)
def task_context(task_id: str | None = None, task: Any = None, args: Any = None,
                 **_: Any) -> None:
    if getattr(getattr(task, "request", None), "is_eager", False):
        return  # an eager task runs inside its caller's request and keeps its context
    clear_ids()
    given = getattr(getattr(task, "request", None), HEADER, None)
    bind_ids(task_id=task_id,
             request_id=given if isinstance(given, str) and REQUEST_ID.fullmatch(given)
             else None)
    if getattr(task, "name", "") == "dispatch.tasks.operation_execute" and args:
        bind_ids(operation_id=str(args[0])[:40])


@task_postrun.connect(weak=False)
def task_context_cleared(task: Any = None, **_: Any) -> None:
    if not getattr(getattr(task, "request", None), "is_eager", False):
        clear_ids()

