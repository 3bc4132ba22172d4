"""The exact-action approval sketch (docs/examples/approval_sketch.yaml, shown verbatim in
docs/workflows.md#waiting-steps) end to end: `manage.py run_workflow` parks the run and exits,
an operator decides in the browser, and a real worker on Redis resumes the run from the store:
a grant dispatches with the permit of the Granted arm, a denial takes the Denied arm with the
operator's reason and sends nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from demo.destinations.runner import list_all
from dispatch.models import Execution, Proposal, TranscriptEntry
from tests.support.mcp import Stack
from tests.support.processes import ROOT
from tests.support.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.redis,
              pytest.mark.slow]

SKETCH = Path(ROOT) / "docs" / "examples" / "approval_sketch.yaml"


@pytest.fixture
def woken(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """A decision in the live server wakes its parked runs on the stack's worker."""
    monkeypatch.setattr("dispatch.services.wakeups.wake_now", stack.pool.wake)
    return stack


def park(stack: Stack) -> tuple[str, Proposal]:
    """Run the sketch as its users do: the command parks the run and exits."""
    draft = stack.world.draft()
    done = subprocess.run(
        [sys.executable, "manage.py", "run_workflow", str(SKETCH), "--agent", "owner",
         "--input", f"email_revision={draft.id}", "--json"],
        cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=120, check=True)
    answer = json.loads(done.stdout)
    assert (answer["state"], answer["waiting_on"]) == ("waiting", "steps[1]"), answer
    return answer["execution_id"], Proposal.objects.get(execution_id=answer["execution_id"])


def finished(execution_id: str) -> bool:
    return Execution.objects.get(id=execution_id).state == "finished"


def outcome(execution_id: str, step: str) -> dict[str, Any]:
    entry = TranscriptEntry.objects.get(execution_id=execution_id, kind="tool_result",
                                        call_id=step)
    return dict(entry.payload["outcome"])


def test_an_approval_in_the_browser_resumes_the_sketch_and_sends_once(
        woken: Stack, page: Any, login: Any) -> None:
    execution_id, proposal = park(woken)
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    wait_for(lambda: finished(execution_id), 60, "the worker to resume and finish the run")
    assert outcome(execution_id, "steps[1]")["status"] == "granted"
    assert outcome(execution_id, "steps[2].arms.Granted[0]")["status"] == "completed"
    sent = list_all(woken.destinations.directory)["email"]
    assert len(sent) == 1


def test_a_denial_in_the_browser_takes_the_denied_arm_with_the_reason(
        woken: Stack, page: Any, login: Any) -> None:
    execution_id, proposal = park(woken)
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.get_by_label("Reason").fill("Wrong customer")
    page.get_by_role("button", name="Deny").click()
    expect(page.get_by_text("Denied. The action will not run.")).to_be_visible()
    wait_for(lambda: finished(execution_id), 60, "the worker to resume and finish the run")
    denied = outcome(execution_id, "steps[1]")
    assert (denied["status"], denied["detail"]["reason"]) == ("rejected", "Wrong customer")
    assert list_all(woken.destinations.directory)["email"] == []
