"""The Celery app. Tasks take ids, never model instances, and call services
(docs/design.md#dispatcher)."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import (
    beat_init,
    heartbeat_sent,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
)
from django.db import close_old_connections

from config import broker
from config import celery_logging as _connected  # noqa: F401 - its receivers: JSON logs, ids
from config.forking import forget_after_fork
from dispatch.observability import traffic

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
broker.register()  # `filesystem://` writes each message whole before it is visible

log = logging.getLogger(__name__)

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect(weak=False)
@task_postrun.connect(weak=False)
def connections_as_around_a_request(task: Any = None, **_: Any) -> None:
    """A task is a request: before and after it, drop a connection that is broken or past
    CONN_MAX_AGE (the health check runs on its next use), keep a good one. Celery's Django
    fixup closes only every CELERY_DB_REUSE_MAX tasks. An eager task runs inside its caller's
    request (and maybe its transaction), so its connection is the caller's: left alone, as the
    fixup does."""
    if getattr(getattr(task, "request", None), "is_eager", False):
        return
    close_old_connections()


@worker_process_init.connect(weak=False)
def no_inherited_connections(**_: Any) -> None:
    """A prefork child makes its own connections and its own pool: what the parent held is
    the parent's (config/forking.py)."""
    forget_after_fork()


@heartbeat_sent.connect(weak=False)
def heartbeat_file(**_: Any) -> None:
    """The worker's liveness: its event loop sends Celery's worker heartbeat every 2 s while it
    is connected to the broker, and touches HEARTBEAT_FILE each time (deploy/probe.py)."""
    from dispatch.heartbeat import heartbeat_touch

    heartbeat_touch()


@task_prerun.connect(weak=False)
def task_started(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        traffic.task_started(task_id)


@task_postrun.connect(weak=False)
def task_ended(task_id: str | None = None, task: Any = None, state: str | None = None,
               **_: Any) -> None:
    """Each task counted by name and the state it ended in (dispatch.observability.traffic)."""
    if task_id and task is not None:
        traffic.task_ended(task_id, task=str(task.name), state=state or "")


@worker_init.connect(weak=False)
def metrics_server(**_: Any) -> None:
    """With WORKER_METRICS_PORT set, the worker's main process answers Prometheus at
    `http://WORKER_METRICS_ADDRESS:PORT/` with its tasks' series: every prefork child's, summed
    from PROMETHEUS_MULTIPROC_DIR (without it, only a `--pool solo` or `threads` worker's tasks
    are its own)."""
    from django.conf import settings
    from prometheus_client import CollectorRegistry, start_http_server

    port: int = settings.WORKER_METRICS_PORT
    if not port:
        return
    registry = CollectorRegistry(auto_describe=False)
    traffic.register(registry)
    try:
        start_http_server(port, addr=settings.WORKER_METRICS_ADDRESS, registry=registry)
    except OSError as error:  # the port is taken: the worker works on, unscraped, and says so
        log.error("the worker's metrics are not served on port %s: %s", port, error)


@worker_init.connect(weak=False)
@beat_init.connect(weak=False)
def runtime_or_exit(**_: Any) -> None:
    """Build the runtime as the worker (or beat) starts, before any task: a deployment it refuses
    (an approval rule that would never apply, docs/design.md#approval-policies) never runs.
    Celery logs and swallows a receiver's exception, so the refusal is an exit."""
    from django.core.exceptions import ImproperlyConfigured

    from dispatch.runtime import get_runtime

    try:
        get_runtime()
    except ImproperlyConfigured as error:
        raise SystemExit(f"django.core.exceptions.ImproperlyConfigured: {error}") from None
