"""Request and task metrics (docs/design.md#running, dispatch/observability/traffic.py): HTTP
requests by route, method and status, Celery tasks by name and state, each with its latency,
summed over every process of a host through prometheus-client's multiprocess mode.

Real gunicorn with two workers and a `PROMETHEUS_MULTIPROC_DIR`: N calls spread over both
workers, and one scrape counts exactly N. A real Celery worker with two prefork children
answers its tasks' series on its own port. In-process, a scrape counts this process's own."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from tests.conftest import World
from tests.support.destinations import free_port
from tests.support.metrics import Samples, samples, value
from tests.support.processes import ROOT, child_env
from tests.support.web import WebServer
from tests.support.workers import wait_for, worker_pool

CALLS = 24
MISSING = 6
CONTRACTS = "api/v1/contracts/"
PROPOSAL = "api/v1/proposals/<str:proposal_id>/"


def scrape() -> Samples:
    return samples(Client().get("/metrics").content.decode())


def counted(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_calls_across_two_gunicorn_workers_are_counted_once_each(
        world: World, tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    # A previous run's counts in the folder: gunicorn empties it as it starts.
    stale = ("from dispatch.observability import traffic\n"
             "for _ in range(1000):\n"
             f"    traffic.request_answered(route={CONTRACTS!r}, method='GET', status=200,"
             " seconds=0.1)\n")
    subprocess.run([sys.executable, "-c", stale], cwd=ROOT, check=True, timeout=60,
                   env={**child_env(), "PROMETHEUS_MULTIPROC_DIR": str(folder)})
    assert list(folder.glob("*.db"))
    web = WebServer(env=child_env(PROMETHEUS_MULTIPROC_DIR=str(folder)),
                    log=tmp_path / "web.log", workers=2)
    web.start()
    try:
        def call(n: int) -> int:
            # A connection of its own per call, so that the calls spread over the workers.
            path = "/api/v1/contracts/" if n < CALLS else f"/api/v1/proposals/prp_nope{n}/"
            with httpx.Client(base_url=web.url, timeout=60) as client:
                return client.get(path, headers={
                    "Authorization": f"Bearer {world.owner_token}"}).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(pool.map(call, range(CALLS + MISSING)))
        status, body = web.get("/metrics")
    finally:
        web.stop()
    assert status == 200, body
    assert statuses == [200] * CALLS + [404] * MISSING, statuses
    found = samples(body.decode())
    assert value(found, "console_http_requests_total", route=CONTRACTS, method="GET",
                 status="200") == CALLS
    assert value(found, "console_http_request_duration_seconds_count", route=CONTRACTS,
                 method="GET") == CALLS
    assert value(found, "console_http_request_duration_seconds_bucket", route=CONTRACTS,
                 method="GET", le="+Inf") == CALLS
    assert value(found, "console_http_request_duration_seconds_sum", route=CONTRACTS,
                 method="GET") > 0
    # The errors, under the route's pattern: no proposal id becomes a label.
    assert value(found, "console_http_requests_total", route=PROPOSAL, method="GET",
                 status="404") == MISSING
    assert not any("prp_nope" in v for _, labels in found for _, v in labels)
    # The store's series are still there, once.
    assert value(found, "console_claims_total") == 0
    # Both workers served: each wrote counts of its own, and the scrape summed them.
    writers = {path.stem.rsplit("_", 1)[-1] for path in folder.glob("counter_*.db")}
    assert len(writers) >= 2, writers


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.slow
def test_a_worker_answers_its_tasks_series_summed_over_its_children(tmp_path: Path) -> None:
    folder, port = tmp_path / "worker-metrics", free_port()
    folder.mkdir()
    with worker_pool(tmp_path) as pool:
        pool.start(concurrency=2, PROMETHEUS_MULTIPROC_DIR=str(folder),
                   WORKER_METRICS_PORT=str(port))
        for _ in range(CALLS):
            pool.send_task("dispatch.tasks.approvals_expire_stale")
        for n in range(MISSING):
            pool.send_task("dispatch.tasks.operation_execute", f"op_missing{n}")

        def read() -> Samples:
            return samples(httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text)

        def done() -> bool:
            found = read()
            return (counted(found, "console_celery_tasks_total",
                            task="dispatch.tasks.approvals_expire_stale", state="SUCCESS")
                    + counted(found, "console_celery_tasks_total",
                              task="dispatch.tasks.operation_execute", state="FAILURE")
                    ) >= CALLS + MISSING

        wait_for(done, 60, "the worker to run every task")
        found = read()
    assert value(found, "console_celery_tasks_total",
                 task="dispatch.tasks.approvals_expire_stale", state="SUCCESS") == CALLS
    assert value(found, "console_celery_task_duration_seconds_count",
                 task="dispatch.tasks.approvals_expire_stale") == CALLS
    assert value(found, "console_celery_tasks_total", task="dispatch.tasks.operation_execute",
                 state="FAILURE") == MISSING
    # No store series on the worker's port: those are the web's.
    assert not any(name.startswith("console_claims") for name, _ in found)


@pytest.mark.django_db
def test_a_scrape_counts_its_own_process_requests_and_tasks(settings: Any) -> None:
    from dispatch.tasks import approvals_expire_stale, operation_execute_task

    settings.CELERY_TASK_ALWAYS_EAGER = True
    before = scrape()
    Client().get("/healthz")
    Client().get("/api/v1/contracts/")
    Client().get("/no/such/page/")
    approvals_expire_stale.delay()
    operation_execute_task.delay("op_missing")
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        return counted(after, name, **labels) - counted(before, name, **labels)

    assert grew("console_http_requests_total", route="healthz", method="GET", status="200") == 1
    assert grew("console_http_requests_total", route=CONTRACTS, method="GET", status="401") == 1
    assert grew("console_http_requests_total", route="unmatched", method="GET",
                status="404") == 1
    assert grew("console_http_requests_total", route="metrics", method="GET",
                status="200") == 1  # the first scrape
    assert grew("console_celery_tasks_total", task="dispatch.tasks.approvals_expire_stale",
                state="SUCCESS") == 1
    assert grew("console_celery_tasks_total", task="dispatch.tasks.operation_execute",
                state="FAILURE") == 1
