"""Kill the agent process after the proposal, after the decision and after the claim; the
restarted execution finishes with no duplicate proposal and no duplicate effect."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo.destinations.runner import list_all
from dispatch.models import Execution, Operation, Proposal
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


def test_killed_after_the_claim(live: World, destinations: Destinations, script: Path) -> None:
    code, out = finish(agent(script))
    assert code == 0 and "waiting" in out, out
    live.grant(Proposal.objects.get())
    code, out = finish(agent(script, "--execution", only_execution(),
                             crash_at="claim.after_commit"))
    assert code == -signal.SIGKILL, out
    assert Operation.objects.get().state == "claimed"
    time.sleep(0.1)
    code, out = finish(agent(script, "--execution", only_execution()))
    assert code == 0 and "finished: sent" in out, out
    assert_single_effect(destinations)
