"""Concurrent steps on real Celery workers over Redis (docs/workflows.md#concurrent-steps): the
run parks, each lane is a task a worker runs, the last lane delivers the join and a worker
resumes the run to its end; no thread of the starting process waits for the lanes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.models import Execution, Operation, TranscriptEntry, WorkflowWait
from tests.conftest import World
from tests.support.workers import WorkerPool, wait_for, worker_pool
from tests.workflows.test_workflow_waits import start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

LOOP = Path(__file__).resolve().parents[1] / "workflows" / "ok" / "parallel_loop_fresh.yaml"


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerPool]:
    """Two workers; this process's lane tasks and wake-ups go to their queue."""
    with worker_pool(tmp_path) as running:
        running.start()
        running.start()

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
