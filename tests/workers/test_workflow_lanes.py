"""Concurrent steps on real Celery workers over Redis (docs/workflows.md#concurrent-steps): the
run parks, each lane is a task a worker runs, the last lane delivers the join and a worker
resumes the run to its end; no thread of the starting process waits for the lanes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.models import (
    AuditEvent,
    Execution,
    Operation,
    TranscriptEntry,
    WorkflowWait,
)
from dispatch.runtime import get_runtime
from dispatch.services.ceilings import Ceiling
from dispatch.workflows import run_workflow
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World
from tests.support.workers import WorkerPool, wait_for, worker_pool
from tests.workflows.test_workflow_waits import start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

LOOP = Path(__file__).resolve().parents[1] / "workflows" / "ok" / "parallel_loop_fresh.yaml"


def route_to(running: WorkerPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's lane tasks and wake-ups go to the pool's queue (the workers' own go
    there already)."""
    def enqueue(execution_id: str, focus: list[list[str]]) -> object:
        from config.celery import app
        from dispatch.tasks import workflow_branch

        def send() -> None:
            with app.connection_for_write(running.broker) as conn:
                workflow_branch.apply_async(
                    kwargs={"execution_id": execution_id, "focus": focus},
                    connection=conn, queue=running.queue)
        return send

    monkeypatch.setattr("dispatch.workflows.parallel.enqueue", enqueue)
    monkeypatch.setattr("dispatch.services.wakeups.wake_now", running.wake)


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerPool]:
    """Two workers; this process's lane tasks and wake-ups go to their queue."""
    with worker_pool(tmp_path) as running:
        running.start()
        running.start()
        route_to(running, monkeypatch)
        yield running


def test_the_lanes_of_a_parallel_loop_run_on_workers_and_join(
        world: World, pool: WorkerPool) -> None:
    run = start(world, LOOP, customers=["cus-001", "cus-002"])
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    wait_for(lambda: Execution.objects.get(id=run.execution_id).state == "finished", 60,
             "the workers to run both lanes and resume the run")
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    assert sorted((e.call_id, e.payload["status"]) for e in lanes) == [
        ("steps[0]/1", "completed"), ("steps[0]/2", "completed")]
    looked_up = sorted(o.result["customer_id"] for o in Operation.objects.filter(
        proposal__execution_id=run.execution_id))
    assert looked_up == ["cus-001", "cus-002"]
    assert WorkflowWait.objects.get(execution_id=run.execution_id).state == "resumed"
    logs = "".join(worker.output() for worker in pool.workers)
    assert logs.count("dispatch.tasks.workflow_branch") >= 2
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert ("loop", "joined") in [(o["step"], o["status"]) for o in final["outcomes"]]


class InFlight:
    """Samples, from a thread of its own (its own connection), how many of the run's actions
    are claimed and not settled, every 10 ms: the most it saw. A sample can miss a peak, never
    invent one; each action holds its slot 0.3 s or more, so a peak lasts for many samples."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id, self.most, self.samples = execution_id, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        from django.db import connection

        try:
            while not self._stop.is_set():
                now = Operation.objects.filter(execution_id=self.execution_id,
                                               state="claimed").count()
                self.most, self.samples = max(self.most, now), self.samples + 1
                time.sleep(0.01)
        finally:
            connection.close()

    def __enter__(self) -> InFlight:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_forty_lanes_at_a_ceiling_of_four_all_finish_never_more_than_four_in_flight(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three worker processes of two pool processes each: up to six lanes run at once, while
    the run allows four actions in flight. Each attempt holds its slot a while (the
    `attempt.after_effect` point pauses 0.3 s, then goes on), so lanes do meet the ceiling:
    those wait for a slot and are woken as actions settle; none is refused."""
    pause = tmp_path / "pause"
    pause.mkdir()
    with worker_pool(tmp_path) as running:
        for _ in range(3):
            running.start(concurrency=2, DISPATCH_PAUSE_AT="attempt.after_effect",
                          DISPATCH_PAUSE_DIR=str(pause), DISPATCH_PAUSE_TIMEOUT="0.3")

        route_to(running, monkeypatch)
        text = LOOP.read_text(encoding="utf-8")
        checked = check_source(text, get_runtime().registry, filename=str(LOOP))
        assert isinstance(checked, CheckedWorkflow), checked
        customers = ["cus-001", "cus-002"] * 20
        run = run_workflow(checked, principal=world.owner, inputs={"customers": customers},
                           source=(text, str(LOOP)),
                           ceiling=Ceiling(calls=100, attempts=100, concurrency=4))
        assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
        with InFlight(run.execution_id) as in_flight:
            wait_for(lambda: Execution.objects.get(id=run.execution_id).state == "finished",
                     240, "the workers to run all 40 lanes and resume the run")
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__regex=r"^steps\[0\]/[0-9]+$")
    assert sorted(e.payload["status"] for e in lanes) == ["completed"] * 40
    operations = Operation.objects.filter(proposal__execution_id=run.execution_id)
    assert operations.count() == 40 and {o.state for o in operations} == {"completed"}
    # At least a few dozen samples over the waves (on a loaded machine one takes far more than
    # its 10 ms: 43 were seen in CI), each wave holding its slots 0.3 s or more.
    assert in_flight.samples >= 20 and 2 <= in_flight.most <= 4, vars(in_flight)
    assert not AuditEvent.objects.filter(kind="dispatch.denied",
                                         details__code="budget_exhausted").exclude(
        details__budget="concurrency").exists()
    waited = WorkflowWait.objects.filter(execution_id=run.execution_id, kind="slot")
    assert waited.exists(), "no lane met the ceiling: the test did not test it"
    assert not waited.filter(state="parked").exists()
