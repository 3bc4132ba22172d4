"""What each process counts of its own traffic (docs/design.md#running): the HTTP requests it
answered, by route, and the Celery tasks it ran, by task: the API's request rate, errors and
latency, and the worker's.

Unlike the store's series (`dispatch.observability.metrics`), these are counted in the memory of
the process that served. Under several processes on one host (gunicorn's workers, a Celery
worker's prefork children) each writes its counts to files of its own in
`PROMETHEUS_MULTIPROC_DIR` (prometheus-client's multiprocess mode, chosen when the variable is set
as the process starts) and a scrape sums them all; without it, a scrape shows its own process's.
The directory is emptied as gunicorn starts (gunicorn.conf.py); a directory of its own for each
kind of process (a tmpfs in docker-compose.yml) keeps one kind's counts out of another's scrape.

- `console_http_requests_total{route,method,status}` (counter): answers, by the URL pattern of
  the view that answered (`api/v1/proposals/<str:proposal_id>/dispatch/`, never the path
  requested), `healthz`/`readyz`/`metrics` for the probes, `unmatched` for anything else.
- `console_http_request_duration_seconds{route,method}` (histogram).
- `console_celery_tasks_total{task,state}` (counter): tasks run, by name and the state they
  ended in (`SUCCESS`, `FAILURE`, `RETRY`, ...).
- `console_celery_task_duration_seconds{task}` (histogram).

No label holds an id, a tenant or a value: routes are patterns, tasks names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from time import monotonic

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

#: This process's own series (the files of PROMETHEUS_MULTIPROC_DIR, when it is set).
OWN = CollectorRegistry(auto_describe=True)
#: Upper bounds (seconds) of the latency histograms.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The route of a request no URL pattern answered.
UNMATCHED = "unmatched"

HTTP_REQUESTS = Counter("console_http_requests", "HTTP requests answered, by route, method and "
                        "status.", ["route", "method", "status"], registry=OWN)
HTTP_DURATION = Histogram("console_http_request_duration_seconds",
                          "Seconds to answer an HTTP request, by route and method.",
                          ["route", "method"], buckets=BUCKETS, registry=OWN)
TASKS = Counter("console_celery_tasks", "Celery tasks run, by task and the state they ended in.",
                ["task", "state"], registry=OWN)
TASK_DURATION = Histogram("console_celery_task_duration_seconds",
                          "Seconds a Celery task ran, by task.", ["task"], buckets=BUCKETS,
                          registry=OWN)

#: HTTP methods counted by name; any other is counted as `other` (a label per made-up method
#: would let any caller grow the series).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_started: dict[str, float] = {}


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


if multiprocess():  # each process writes its files there from its first count
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)


def request_answered(*, route: str, method: str, status: int, seconds: float) -> None:
    method = method if method in METHODS else "other"
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_DURATION.labels(route, method).observe(seconds)


def task_started(task_id: str) -> None:
    _started[task_id] = monotonic()


def task_ended(task_id: str, *, task: str, state: str) -> None:
    started = _started.pop(task_id, None)
    TASKS.labels(task, state or "UNKNOWN").inc()
    if started is not None:
        TASK_DURATION.labels(task).observe(monotonic() - started)


class _Own(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from OWN.collect()


def register(registry: CollectorRegistry) -> None:
    """Add the traffic series to a scrape's `registry`: every process's of
    PROMETHEUS_MULTIPROC_DIR, else this process's."""
    if multiprocess():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # untyped __init__
    else:
        registry.register(_Own())
