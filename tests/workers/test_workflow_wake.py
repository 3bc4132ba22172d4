"""A decision wakes the workflow execution parked on it (docs/workflows.md#waiting-steps): on a
real Celery worker over Redis, with no poller running, within a second of the grant's commit;
a worker restarted while the run is parked loses nothing, since the parked step is in the
store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Execution, Proposal, TranscriptEntry, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.workflows import WorkflowRun, run_workflow
from dispatch.workflows.resume import deliver_input
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.workers import WorkerPool, wait_for, worker_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

SKETCH = Path(__file__).resolve().parents[2] / "docs" / "examples" / "approval_sketch.yaml"


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerPool]:
    """One worker; this process's wake-ups (a decision committed here) go to its queue."""
    with worker_pool(tmp_path) as running:
        running.start()
        monkeypatch.setattr("dispatch.services.wakeups.wake_now", running.wake)
        # A first task warms the worker's database connection up: the measure is the wake-up.
        running.wake(wait_id="wwt_none")
        wait_for(lambda: "succeeded" in running.workers[-1].output(), 30, "the warm-up task")
        yield running


def start(world: World) -> tuple[WorkflowRun, Proposal]:
    text = SKETCH.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(SKETCH))
    assert isinstance(checked, CheckedWorkflow), checked
    run = run_workflow(checked, principal=world.owner,
                       inputs={"email_revision": world.draft().id}, source=(text, str(SKETCH)))
    assert (run.state, run.waiting_on) == ("waiting", "steps[1]")
    return run, Proposal.objects.get(execution_id=run.execution_id)


def settled(execution_id: str, step: str) -> bool:
    return TranscriptEntry.objects.filter(execution_id=execution_id, kind="tool_result",
                                          call_id=step).exists()


def test_a_grant_wakes_the_parked_run_within_a_second(
        live: World, destinations: Destinations, pool: WorkerPool) -> None:
    run, proposal = start(live)
    granted_at = time.monotonic()
    approval_decide(approver=live.approver, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, now=timezone.now())
    wait_for(lambda: settled(run.execution_id, "steps[1]"), 5, "the wake-up")
    assert time.monotonic() - granted_at < 1.0
    wait_for(lambda: Execution.objects.get(id=run.execution_id).state == "finished", 30,
             "the resumed run to finish")
    assert len(list_all(destinations.directory)["email"]) == 1
    # A duplicate wake-up of the same decision resumes nothing again.
    before = TranscriptEntry.objects.filter(execution_id=run.execution_id).count()
    pool.wake(approval_id=proposal.approval.id)
    wait_for(lambda: pool.workers[-1].output().count("succeeded") >= 3, 30, "the duplicate")
    assert TranscriptEntry.objects.filter(execution_id=run.execution_id).count() == before
    assert len(list_all(destinations.directory)["email"]) == 1
    assert WorkflowWait.objects.get(execution_id=run.execution_id).state == "resumed"


def test_a_worker_restarted_while_the_run_is_parked_loses_nothing(
        live: World, destinations: Destinations, pool: WorkerPool) -> None:
    run, proposal = start(live)
    pool.workers[-1].kill()
    pool.start()
    approval_decide(approver=live.approver, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason="not this customer", now=timezone.now())
    wait_for(lambda: Execution.objects.get(id=run.execution_id).state == "finished", 30,
             "the new worker to resume the run")
    denied = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="tool_result",
                                         call_id="steps[1]").payload["outcome"]
    assert (denied["status"], denied["detail"]["reason"]) == ("rejected", "not this customer")
    assert list_all(destinations.directory)["email"] == []


def test_an_input_wakes_the_run_parked_at_receive(
        live: World, destinations: Destinations, pool: WorkerPool) -> None:
    path = Path(__file__).resolve().parents[1] / "workflows" / "runtime" / "receive_then_send.yaml"
    text = path.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(path))
    assert isinstance(checked, CheckedWorkflow), checked
    run = run_workflow(checked, principal=live.owner, source=(text, str(path)))
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    deliver_input(principal=live.owner, execution_id=run.execution_id, value={
        "from": "support@acme.example", "to": ["ada@example.com"], "subject": "Your refund",
        "body": "We have refunded your order."}, now=timezone.now())
    # The worker resumes it up to its next wait: the approval of the draft it made.
    wait_for(lambda: WorkflowWait.objects.filter(execution_id=run.execution_id, step="steps[3]",
                                                 state="parked").exists(), 30,
             "the worker to resume the run up to its approval")
    assert settled(run.execution_id, "steps[0]")
