"""Concurrent steps at run time (docs/workflows.md#concurrent-steps, docs/design.md#budgets):
parallel branches and parallel loops fan out over the store and join durably; two branches
naming one handle are refused before any claim; a race takes the first read and cancels the
other; a race holding a protected write is refused at check time and, forced past the checker,
at run time.

A lane is run here as a worker's task runs it (`run_branch`): the test is the worker, so the
interleaving is the test's. The cross-process runs are in tests/concurrency/test_lanes_race.py.
"""

from __future__ import annotations

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
from dispatch.runtime import get_runtime
from dispatch.workflows import WorkflowRefused, WorkflowRun, run_workflow
from dispatch.workflows.branches import run_branch, sweep
from dispatch.workflows.resume import resume_stale, wake
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source, parse_workflow
from protocols.workflow.checked import _issue  # forcing an IR past the checker, on purpose
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.workflows.test_workflow_waits import start

pytestmark = pytest.mark.django_db

HERE = Path(__file__).parent
OK, RUNTIME = HERE / "ok", HERE / "runtime"


def forced(path: Path) -> CheckedWorkflow:
    """The file's IR as a CheckedWorkflow although the checker refuses it (a hand-built IR)."""
    text = path.read_text(encoding="utf-8")
    assert isinstance(check_source(text, get_runtime().registry, filename=path.name),
                      Diagnostics)
    workflow = parse_workflow(text, filename=path.name)
    assert not isinstance(workflow, Diagnostics)
    registry = get_runtime().registry
    operations = {"email.send", "crm.lookup"}
    return _issue(workflow, workflow.effects,
                  {op: str(registry.resolve(op).fingerprint) for op in operations})


def lane(run: WorkflowRun, key: str, label: str) -> str:
    return run_branch(run.execution_id, [[key, label]], now=timezone.now())


def test_two_parallel_branches_writing_two_drafts_both_send(
    live: World, destinations: Destinations,
) -> None:
    first, second = live.draft(to=["ada@example.com"]), live.draft(to=["grace@example.com"])
    run = start(live, OK / "parallel_disjoint.yaml", first=first.id, second=second.id)
    # The run parks at the step while its branches run on workers: nothing runs inline.
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    join = WorkflowWait.objects.get(execution_id=run.execution_id)
    assert (join.kind, join.state) == ("join", "parked")
    assert not Proposal.objects.filter(execution_id=run.execution_id).exists()
    # Each lane parks at its own approval.
    assert lane(run, "steps[0]", "left") == "waiting"
    assert lane(run, "steps[0]", "right") == "waiting"
    proposals = Proposal.objects.filter(execution_id=run.execution_id).order_by("call_id")
    assert [p.call_id for p in proposals] == ["steps[0].parallel.left[0]",
                                              "steps[0].parallel.right[0]"]
    for proposal in proposals:
        live.grant(proposal)
    # The decisions resume the lanes (a worker each); the last lane delivers the join.
    assert lane(run, "steps[0]", "left") == "ended"
    assert WorkflowWait.objects.get(id=join.id).delivered_at is None
    assert lane(run, "steps[0]", "right") == "ended"
    assert WorkflowWait.objects.get(id=join.id).delivered_at is not None
    assert lane(run, "steps[0]", "right") == "ended"  # a duplicate task does nothing
    # The wake-ups' fallback resumes each parked step once (the lanes passed the approvals
    # the decisions woke; the join was delivered): then nothing is left to resume.
    assert resume_stale(now=timezone.now()) == 3
    assert resume_stale(now=timezone.now()) == 0
    assert set(WorkflowWait.objects.filter(execution_id=run.execution_id).values_list(
        "state", flat=True)) == {"resumed"}
    execution = Execution.objects.get(id=run.execution_id)
    assert execution.state == "finished"
    sent = list_all(destinations.directory)["email"]
    assert sorted(m["to"][0] for m in sent) == ["ada@example.com", "grace@example.com"]
    assert Operation.objects.filter(proposal__execution_id=run.execution_id).count() == 2
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert final["state"] == "finished"
    steps = [(o["step"], o["status"]) for o in final["outcomes"]]
    assert ("parallel", "joined") in steps
    assert steps.count(("dispatch", "completed")) == 2


def test_two_branches_naming_one_draft_are_refused_before_any_claim(world: World) -> None:
    checked = forced(RUNTIME / "parallel_shared_draft.yaml")
    draft = world.draft()
    run = run_workflow(checked, principal=world.owner, inputs={"draft": draft.id})
    assert_refused_before_any_claim(run, "`left` and `right` both name resource")


def assert_refused_before_any_claim(run: WorkflowRun, message: str) -> None:
    """`parallel_capture` at the step, and nothing proposed, approved, claimed or enqueued."""
    assert run.state == "denied"
    assert run.denial is not None
    assert (run.denial.code, run.denial.path) == ("parallel_capture", "steps[0]")
    assert message in run.denial.message
    assert not Proposal.objects.filter(execution_id=run.execution_id).exists()
    assert not Operation.objects.filter(proposal__execution_id=run.execution_id).exists()
    assert not WorkflowWait.objects.filter(execution_id=run.execution_id).exists()
    assert not TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                              call_id="steps[0]").exists()


def test_a_parallel_loop_naming_an_outer_proposal_is_refused(world: World) -> None:
    """Every iteration of a parallel loop runs one body: an owned outer value it names would
    be named by all of them."""
    text = (OK / "parallel_loop_fresh.yaml").read_text(encoding="utf-8")
    text = text.replace("inputs:\n  customers: json\nsteps:\n",
                        "inputs:\n  customers: json\nsteps:\n  - propose: crm.lookup\n"
                        "    args: {customer_id: cus-001}\n    bind: outer\n")
    text = text.replace("      - dispatch: $lookup", "      - dispatch: $outer")
    workflow = parse_workflow(text, filename="loop.yaml")
    assert not isinstance(workflow, Diagnostics)
    assert isinstance(check_source(text, get_runtime().registry, filename="loop.yaml"),
                      Diagnostics)
    fingerprint = str(get_runtime().registry.resolve("crm.lookup").fingerprint)
    checked = _issue(workflow, workflow.effects, {"crm.lookup": fingerprint})
    run = run_workflow(checked, principal=world.owner, inputs={"customers": ["a", "b"]})
    assert run.denial is not None and run.denial.code == "parallel_capture"
    assert Operation.objects.filter(proposal__execution_id=run.execution_id).count() == 0


def test_a_parallel_loop_runs_each_iteration_as_a_lane(world: World) -> None:
    run = start(world, OK / "parallel_loop_fresh.yaml", customers=["cus-001", "cus-002"])
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    assert lane(run, "steps[0]", "2") == "ended"
    assert lane(run, "steps[0]", "1") == "ended"
    assert sweep(now=timezone.now()) == 0  # the last lane delivered the join already
    join = WorkflowWait.objects.get(execution_id=run.execution_id, kind="join")
    # Two wake-ups of the delivered join (the lane's, a duplicate): the run resumes once.
    assert [r.state for r in wake(wait_id=join.id, now=timezone.now())] == ["finished"]
    assert wake(wait_id=join.id, now=timezone.now()) == []
    assert resume_stale(now=timezone.now()) == 0
    assert AuditEvent.objects.filter(kind="workflow.resumed",
                                     details__execution_id=run.execution_id).count() == 1
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert final["state"] == "finished"
    results = sorted(o.result["customer_id"] for o in Operation.objects.filter(
        proposal__execution_id=run.execution_id))
    assert results == ["cus-001", "cus-002"]


def test_a_race_of_two_reads_returns_the_first_and_cancels_the_other(world: World) -> None:
    run = start(world, RUNTIME / "race_lookups.yaml")
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    assert lane(run, "steps[0]", "fast") == "ended"
    # The loser's worker comes later: it finds the winner before its first step and stops.
    assert lane(run, "steps[0]", "slow") == "ended"
    assert resume_stale(now=timezone.now()) == 1
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    outcomes = {(o["step"], o["status"], o["detail"].get("winner")) for o in final["outcomes"]}
    assert ("race", "won", "fast") in outcomes
    operations = Operation.objects.filter(proposal__execution_id=run.execution_id)
    assert [o.result["customer_id"] for o in operations] == ["cus-001"]
    assert not Proposal.objects.filter(execution_id=run.execution_id,
                                       call_id__contains=".race.slow").exists()
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    assert {e.call_id: e.payload["status"] for e in lanes} == {
        "steps[0]/fast": "completed", "steps[0]/slow": "cancelled"}


def test_a_race_holding_email_send_is_refused_at_check_and_at_run_time(world: World) -> None:
    path = RUNTIME / "race_send.yaml"
    found = check_source(path.read_text(encoding="utf-8"), get_runtime().registry,
                         filename=path.name)
    assert isinstance(found, Diagnostics)
    assert "AGL-E007" in {d.code.value for d in found}
    checked = forced(path)
    before = Execution.objects.count()
    with pytest.raises(WorkflowRefused) as refused:
        run_workflow(checked, principal=world.owner, inputs={"draft": world.draft().id})
    assert refused.value.code == "protected_race"
    assert refused.value.path == "steps[2].arms.Granted[0].race.send[0]"
    # Refused before any step: no execution, no proposal, no audit of a run.
    assert Execution.objects.count() == before
    assert not Proposal.objects.filter(principal=world.owner, operation="email.send").exists()
    assert not AuditEvent.objects.filter(kind="workflow.parked").exists()


def test_a_race_of_two_models_runs_in_the_callers_process_and_cancels_the_loser(
    world: World,
) -> None:
    """The model adapters are the caller's: it runs the model lanes itself, in turn."""
    from tests.workflows.test_agent_steps import Model, lookup

    path = OK / "race_reads.yaml"
    text = path.read_text(encoding="utf-8")
    checked = check_source(text, get_runtime().registry, filename=str(path))
    assert isinstance(checked, CheckedWorkflow), checked
    quick = Model(lookup(), final={"answer": "gold"})
    careful = Model(lookup("cus-002"), final={"answer": "silver"})
    run = run_workflow(checked, principal=world.owner, agents={"quick": quick,
                                                               "careful": careful},
                       source=(text, str(path)))
    assert run.state == "finished", run
    assert [(o.step, o.status, o.detail.get("lane") or o.detail.get("winner"))
            for o in run.outcomes if o.step == "race"] == [
        ("race", "completed", "fast"), ("race", "cancelled", "thorough"),
        ("race", "won", "fast")]
    assert (quick.asked, careful.asked) == (2, 0)  # the loser never ran its model
    lanes = TranscriptEntry.objects.filter(execution_id=run.execution_id,
                                           call_id__startswith="steps[0]/")
    assert {e.call_id: e.payload["status"] for e in lanes} == {
        "steps[0]/fast": "completed", "steps[0]/thorough": "cancelled"}
