"""Concurrent steps across OS processes on the real database (docs/workflows.md#concurrent-steps):
eight processes running every lane of one parallel step and the execution itself never propose
or send twice; a race's winner withdraws the proposal a losing lane made in another process
before that lane could claim it; a lane worker killed mid-lane or before delivering its join
loses nothing."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import (
    AuditEvent,
    Execution,
    Operation,
    Proposal,
    TranscriptEntry,
    WorkflowWait,
)
from dispatch.workflows.branches import LANE_LEASE, run_branch, sweep
from dispatch.workflows.resume import resume_stale
from tests.conftest import World, make_world
from tests.support.destinations import Destinations
from tests.support.lanes import lane_racer
from tests.support.paused import PausedChild
from tests.support.processes import ROOT, child_env
from tests.workflows.test_workflow_waits import start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROCESSES = 8
WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
LANES = [["steps[0]", "left"], ["steps[0]", "right"]]


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


def race_lanes(execution_id: str) -> list[list[str]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    env = child_env()
    procs = [ctx.Process(target=lane_racer, args=(env, execution_id, LANES, barrier, results, i))
             for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    answers = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    flat = [a for _, each in answers for a in each]
    assert not [a for a in flat if a.startswith("error")], flat
    return [each for _, each in sorted(answers)]


def test_eight_processes_running_one_parallel_workflow_never_double_send(
    live: World, destinations: Destinations,
) -> None:
    first, second = live.draft(to=["ada@example.com"]), live.draft(to=["grace@example.com"])
    run = start(live, WORKFLOWS / "ok" / "parallel_disjoint.yaml", first=first.id,
                second=second.id)
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    # Eight processes run both lanes and the execution at once: one proposal per branch.
    race_lanes(run.execution_id)
    proposals = list(Proposal.objects.filter(execution_id=run.execution_id))
    assert len(proposals) == 2
    for proposal in proposals:
        live.grant(proposal)
    # Eight again, now that both are granted: each lane dispatches, the run joins and ends.
    answers = race_lanes(run.execution_id)
    assert Execution.objects.get(id=run.execution_id).state == "finished", answers
    sent = list_all(destinations.directory)["email"]
    assert sorted(m["to"][0] for m in sent) == ["ada@example.com", "grace@example.com"]
    assert Operation.objects.filter(proposal__execution_id=run.execution_id).count() == 2
    assert TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                          kind="final").count() == 1
    resume_stale(now=timezone.now())  # whatever a wake-up left parked: nothing sends again
    assert len(list_all(destinations.directory)["email"]) == 2


def test_the_winner_withdraws_the_proposal_of_a_loser_in_another_process(
    world: World, tmp_path: Path,
) -> None:
    run = start(world, WORKFLOWS / "runtime" / "race_lookups.yaml")
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    with PausedChild(tmp_path, "branch", run.execution_id, "steps[0]", "slow",
                     pause="dispatch.before_claim") as slow:
        slow.reached()  # the loser proposed; its claim has not begun
        loser = Proposal.objects.get(execution_id=run.execution_id,
                                     call_id="steps[0].race.slow[0]")
        assert loser.cancelled_at is None
        assert run_branch(run.execution_id, [["steps[0]", "fast"]], now=timezone.now()) \
            == "ended"
        loser.refresh_from_db()
        assert loser.cancelled_at is not None  # withdrawn by the winner, before any claim
        assert slow.result() == {"lane": "ended"}
    assert not Operation.objects.filter(proposal=loser).exists()
    assert AuditEvent.objects.filter(kind="proposal.cancelled", proposal_id=loser.id).count() == 1
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    statuses = {e.call_id: e.payload["status"] for e in lanes}
    assert statuses["steps[0]/fast"] == "completed"
    assert statuses["steps[0]/slow"] in {"denied", "cancelled"}
    resume_stale(now=timezone.now())
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert final["state"] == "finished"
    assert [(o["status"], o["detail"]["winner"]) for o in final["outcomes"]
            if o["step"] == "race"] == [("won", "fast")]


def test_the_winner_cancels_a_loser_whose_fetch_is_in_flight_in_another_process(
    world: World, destinations: Destinations,
) -> None:
    """The losing lane runs in another process and its fetch waits on a source that answers
    only after 30 s. The winner ends: the loser's handler is cancelled through its context, the
    call in flight is abandoned at once and recorded honestly (the request was out: `unknown`,
    never no effect), the loser's lane ends cancelled and the race is won once."""
    from dispatch.models import Attempt
    from dispatch.runtime import get_runtime
    from dispatch.workflows import run_workflow
    from protocols.workflow import CheckedWorkflow, check_source
    from tests.support.research import Researcher

    researcher = Researcher.enrol(world, destinations.sources_url)
    path = WORKFLOWS / "runtime" / "race_fetches.yaml"
    text = path.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(path))
    assert isinstance(checked, CheckedWorkflow), checked
    run = run_workflow(checked, principal=researcher.agent, source=(text, str(path)), inputs={
        "question": researcher.question().id, "quick": researcher.source("bees"),
        "stuck": researcher.source("hang.test")})
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    stuck = subprocess.Popen(
        [sys.executable, "-m", "tests.support.child", "branch", run.execution_id, "steps[0]",
         "stuck"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env())
    try:
        in_flight = Attempt.objects.filter(operation__proposal__execution_id=run.execution_id,
                                           operation__proposal__call_id__contains="stuck",
                                           ended_at__isnull=True)
        deadline = time.monotonic() + 60
        while not in_flight.exists():
            assert stuck.poll() is None, stuck.communicate()
            assert time.monotonic() < deadline, "the stuck lane's attempt never started"
            time.sleep(0.05)
        started = time.monotonic()
        assert run_branch(run.execution_id, [["steps[0]", "quick"]], now=timezone.now()) \
            == "ended"
        out, err = stuck.communicate(timeout=60)
    finally:
        if stuck.poll() is None:
            stuck.kill()
    assert time.monotonic() - started < 15  # the source would have answered after 30 s
    assert stuck.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"lane": "ended"}
    loser = Operation.objects.get(proposal__execution_id=run.execution_id,
                                  proposal__call_id__contains="stuck")
    assert loser.proposal.cancelled_at is not None
    assert loser.state == "unknown"  # the request was out: never failed_no_effect
    attempt = Attempt.objects.get(operation=loser)
    assert (attempt.outcome, attempt.ended_at is not None) == ("uncertain", True)
    assert "cancelled while the call was in flight" in attempt.error
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    statuses = {e.call_id: e.payload["status"] for e in lanes}
    assert statuses == {"steps[0]/quick": "completed", "steps[0]/stuck": "cancelled"}
    resume_stale(now=timezone.now())
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert final["state"] == "finished"
    assert [(o["status"], o["detail"]["winner"]) for o in final["outcomes"]
            if o["step"] == "race"] == [("won", "quick")]


def test_a_lane_worker_killed_loses_neither_its_lane_nor_the_join(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGKILL mid-lane (before its first step) and after a lane's end (before its join is
    delivered): the sweep enqueues the dead lane again and delivers the join; the run resumes
    once and looks each customer up once."""
    run = start(world, WORKFLOWS / "ok" / "parallel_loop_fresh.yaml",
                customers=["cus-001", "cus-002"])
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    for lane, point in (("1", "workflow.lane_step"), ("2", "workflow.lane_ended")):
        child = subprocess.run(
            [sys.executable, "-m", "tests.support.child", "branch", run.execution_id,
             "steps[0]", lane], cwd=ROOT, capture_output=True, text=True, timeout=120,
            env=child_env(DISPATCH_CRASH_AT=point))
        assert child.returncode == -signal.SIGKILL, child.stderr
    ended = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    assert [e.call_id for e in ended] == ["steps[0]/2"]  # lane 2 ended; lane 1 died first
    join = WorkflowWait.objects.get(execution_id=run.execution_id, kind="join")
    assert join.delivered_at is None  # lane 2 died before delivering it
    enqueued: list[list[list[str]]] = []
    monkeypatch.setattr("dispatch.workflows.branches.enqueue",
                        lambda execution_id, focus: lambda: enqueued.append(focus))
    assert sweep(now=timezone.now()) == 0  # within the lease: the lane's task may still run
    later = timezone.now() + LANE_LEASE + timedelta(seconds=1)
    assert sweep(now=later) == 1
    assert enqueued == [[["steps[0]", "1"]]]
    assert run_branch(run.execution_id, enqueued[0], now=timezone.now()) == "ended"
    assert WorkflowWait.objects.get(id=join.id).delivered_at is not None
    assert resume_stale(now=timezone.now()) == 1
    assert resume_stale(now=timezone.now()) == 0
    assert Execution.objects.get(id=run.execution_id).state == "finished"
    looked_up = sorted(o.result["customer_id"] for o in Operation.objects.filter(
        proposal__execution_id=run.execution_id))
    assert looked_up == ["cus-001", "cus-002"]
