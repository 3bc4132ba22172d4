"""Kill the agent process after the proposal, after the decision and after the claim; the
restarted execution makes no duplicate proposal and no duplicate effect (after the claim, whose
attempt 1 committed with it, it waits for reconciliation)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Execution, Operation, Proposal
from dispatch.services.reconciliation import reconcile_operations
from tests.conftest import MAILBOX, World
from tests.support.destinations import Destinations
from tests.support.processes import ROOT, child_env
from tests.support.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = {"agent": "owner", "steps": [
    {"call": "resources.create", "name": "reply", "arguments": {"kind": "email_draft", "payload": {
        "from": MAILBOX, "to": ["ada@example.com"], "subject": "Renewal", "body": "Done."}}},
    {"call": "email.send", "arguments": {"draft": {"$result": "reply"}}},
    {"final": "sent"},
]}


def agent(script: Path, *extra: str, crash_at: str = "") -> subprocess.Popen[str]:
    env = child_env(**({"DISPATCH_CRASH_AT": crash_at} if crash_at else {}))
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_agent", str(script), "--inline", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def only_execution() -> str:
    return Execution.objects.get().id


def assert_single_effect(destinations: Destinations) -> None:
    assert Proposal.objects.count() == 1
    assert Operation.objects.count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1
    assert Execution.objects.get().state == "finished"


def test_killed_after_the_proposal(live: World, destinations: Destinations,
                                   script: Path) -> None:
    code, out = finish(agent(script, crash_at="agent.after_proposal"))
    assert code == -signal.SIGKILL, out
    execution = only_execution()
    code, out = finish(agent(script, "--execution", execution))
    assert code == 0 and "waiting" in out, out
    live.grant(Proposal.objects.get())
    code, out = finish(agent(script, "--execution", execution))
    assert code == 0 and "finished: sent" in out, out
    assert_single_effect(destinations)


def test_killed_after_the_decision(live: World, destinations: Destinations,
                                   script: Path) -> None:
    waiting = agent(script, "--poll", "0.5")
    wait_for(lambda: Execution.objects.filter(state="waiting").exists(), 60, "the agent to wait")
    live.grant(Proposal.objects.get())
    waiting.send_signal(signal.SIGKILL)
    finish(waiting)
    code, out = finish(agent(script, "--execution", only_execution()))
    assert code == 0 and "finished: sent" in out, out
    assert_single_effect(destinations)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stopped_while_polling_it_exits_0_waiting_and_resumes(
    live: World, destinations: Destinations, script: Path, signum: int,
) -> None:
    """A signal while it polls for a human (dispatch/stopping.py): out at once, status 0,
    'waiting' printed as with --poll 0; the execution resumes later, once."""
    waiting = agent(script, "--poll", "30")
    wait_for(lambda: Execution.objects.filter(state="waiting").exists(), 60, "the agent to wait")
    time.sleep(0.5)  # past the waiting state's commit, into the poll's wait
    sent = time.monotonic()
    waiting.send_signal(signum)
    code, out = finish(waiting)
    assert time.monotonic() - sent < 1.0, out
    assert code == 0 and out.rstrip().endswith("waiting"), out
    live.grant(Proposal.objects.get())
    code, out = finish(agent(script, "--execution", only_execution()))
    assert code == 0 and "finished: sent" in out, out
    assert_single_effect(destinations)


def test_killed_after_the_claim(live: World, destinations: Destinations, script: Path) -> None:
    """Inline execution claims with attempt 1 in one transaction
    (docs/design.md#write-transactions-per-action): killed after that commit, the attempt is open
    and nothing was sent. The restarted agent does not send (the attempt may be running
    somewhere); reconciliation settles it as any open attempt: past the timeout it is unknown,
    for a lookup or a person."""
    code, out = finish(agent(script))
    assert code == 0 and "waiting" in out, out
    live.grant(Proposal.objects.get())
    code, out = finish(agent(script, "--execution", only_execution(),
                             crash_at="claim.after_commit"))
    assert code == -signal.SIGKILL, out
    operation = Operation.objects.get()
    assert (operation.state, operation.attempts_made) == ("claimed", 1)
    assert list(operation.attempts.values_list("number", "ended_at")) == [(1, None)]
    time.sleep(0.1)
    code, out = finish(agent(script, "--execution", only_execution()))
    assert code == 0 and "waiting" in out and "finished" not in out, out
    assert operation.attempts.count() == 1
    assert list_all(destinations.directory)["email"] == []
    reconcile_operations(now=timezone.now() + timedelta(seconds=20), enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "unknown"  # the sink holds nothing, but absence is no proof
    assert Proposal.objects.count() == 1 and Operation.objects.count() == 1
    assert list_all(destinations.directory)["email"] == []
