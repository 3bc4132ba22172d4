"""Two wake-ups of one decision, in two OS processes on the real database, resume the parked
run once (docs/workflows.md#waiting-steps): the first claims the parked step with a conditional
UPDATE and is held right after its claim; the second finds nothing parked."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import AuditEvent, Execution, Proposal, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.workflows import run_workflow
from dispatch.workflows.resume import resume_stale, wake
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import World, make_world
from tests.support.destinations import Destinations
from tests.support.paused import PausedChild

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SKETCH = Path(__file__).resolve().parents[2] / "docs" / "examples" / "approval_sketch.yaml"


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


def test_two_wake_ups_in_two_processes_resume_the_run_once(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    text = SKETCH.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(SKETCH))
    assert isinstance(checked, CheckedWorkflow), checked
    run = run_workflow(checked, principal=live.owner, inputs={"email_revision": live.draft().id},
                       source=(text, str(SKETCH)))
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    live.grant(proposal)
    with PausedChild(tmp_path, "wake", proposal.approval.id,
                     pause="workflow.resume_claimed") as first:
        first.reached()  # it holds the claim; the run has not resumed
        assert WorkflowWait.objects.get(execution_id=run.execution_id).state == "resuming"
        assert wake(approval_id=proposal.approval.id, now=timezone.now()) == []
        assert resume_stale(now=timezone.now()) == 0  # the fallback leaves a live claim alone
        assert first.result() == {"resumed": ["finished"]}
    assert Execution.objects.get(id=run.execution_id).state == "finished"
    assert len(list_all(destinations.directory)["email"]) == 1
    assert AuditEvent.objects.filter(kind="workflow.resumed",
                                     details__execution_id=run.execution_id).count() == 1


def test_a_decision_committed_while_the_run_parks_still_wakes_it(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    """The grant commits after the step read its approval pending and before the park: its
    wake-up finds nothing parked, so the park itself, seeing the decision, wakes the run."""
    draft = live.draft()
    with PausedChild(tmp_path, "start", live.owner.id, str(SKETCH), f"email_revision={draft.id}",
                     pause="workflow.before_park", CELERY_TASK_ALWAYS_EAGER="true") as child:
        child.reached()
        proposal = Proposal.objects.get(execution_id__startswith="exe_", principal=live.owner)
        live.grant(proposal)  # commits; nothing is parked on it yet
        assert wake(approval_id=proposal.approval.id, now=timezone.now()) == []
        answer = child.result()
    # The child parked, saw the grant and woke the run (a worker's task, run eagerly there).
    assert answer["state"] == "waiting"
    assert Execution.objects.get(id=answer["execution_id"]).state == "finished"
    assert WorkflowWait.objects.get(execution_id=answer["execution_id"]).state == "resumed"
    assert len(list_all(destinations.directory)["email"]) == 1
