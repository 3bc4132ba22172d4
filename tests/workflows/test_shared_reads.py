"""The shareable read grant at run time (docs/workflows.md#concurrent-steps): two parallel
branches naming one question through `research.fetch` (which grants shared reads) run to their
end; with the grant withdrawn, the same IR forced past the checker is refused
`parallel_capture` before any branch proposes or claims anything. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from django.utils import timezone

from demo import contracts as demo_contracts
from dispatch.models import Execution, Operation, Proposal, TranscriptEntry, WorkflowWait
from dispatch.runtime import get_runtime
from dispatch.workflows import WorkflowRefused, WorkflowRun, ownership, run_workflow
from dispatch.workflows.branches import run_branch
from dispatch.workflows.resume import wake
from dispatch.workflows.values import HandleValue
from protocols.contracts import OperationContract
from protocols.denials import Denial, DenialCode
from protocols.workflow import CheckedWorkflow, Diagnostics, check_source, parse_workflow
from protocols.workflow.checked import _issue  # forcing an IR past the checker, on purpose
from protocols.workflow.ir import Loop, Parallel
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import Researcher
from tests.workflows.test_concurrent_steps import assert_refused_before_any_claim

pytestmark = pytest.mark.django_db

FILE = Path(__file__).parent / "runtime" / "parallel_fetch_sources.yaml"
TEXT = FILE.read_text(encoding="utf-8")


@pytest.fixture
def withdrawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The runtime rebuilt with research.fetch's shareable grant withdrawn."""
    original = demo_contracts.CONTRACTS["research.fetch"]

    def unshared(fingerprint: str) -> OperationContract:
        return replace(original(fingerprint), shareable=False)

    monkeypatch.setitem(demo_contracts.CONTRACTS, "research.fetch", unshared)  # type: ignore[arg-type]
    get_runtime.cache_clear()
    yield
    monkeypatch.undo()
    get_runtime.cache_clear()


def start(researcher: Researcher, checked: CheckedWorkflow, source: bool = True) -> WorkflowRun:
    question = researcher.question()
    return run_workflow(checked, principal=researcher.agent, inputs={
        "question": question.id, "first": researcher.source("bees"),
        "second": researcher.source("tides")}, source=(TEXT, str(FILE)) if source else None)


def lane(run: WorkflowRun, label: str) -> str:
    return run_branch(run.execution_id, [["steps[0]", label]], now=timezone.now())


def test_two_branches_sharing_a_shareable_reads_handle_run_to_the_end(
    live: World, destinations: Destinations,
) -> None:
    assert get_runtime().registry.resolve("research.fetch").shareable
    checked = check_source(TEXT, get_runtime().registry, filename=str(FILE))
    assert isinstance(checked, CheckedWorkflow), checked
    researcher = Researcher.enrol(live, destinations.sources_url)
    run = start(researcher, checked)
    # The ownership check passed: the run fanned its lanes out and parks at the join.
    assert (run.state, run.waiting_on) == ("waiting", "steps[0]")
    assert lane(run, "first") == "ended"
    assert lane(run, "second") == "ended"
    # The last lane delivered the join; its wake-up (a worker's, here called) resumes the run.
    join = WorkflowWait.objects.get(execution_id=run.execution_id, kind="join")
    assert join.delivered_at is not None
    assert [r.state for r in wake(wait_id=join.id, now=timezone.now())] == ["finished"]
    execution = Execution.objects.get(id=run.execution_id)
    assert execution.state == "finished"
    operations = Operation.objects.filter(proposal__execution_id=run.execution_id)
    assert sorted(o.state for o in operations) == ["completed", "completed"]
    # Both fetched for the one question, and each issued its own receipt.
    questions = {p.arguments["question"]["id"] for p in Proposal.objects.filter(
        execution_id=run.execution_id)}
    assert len(questions) == 1
    receipts = {o.result["receipt"]["id"] for o in operations}  # type: ignore[index]
    assert len(receipts) == 2
    final = TranscriptEntry.objects.get(execution_id=run.execution_id, kind="final").payload
    assert final["state"] == "finished"
    assert [(o["step"], o["status"]) for o in final["outcomes"]].count(
        ("dispatch", "completed")) == 2


def test_without_the_grant_both_the_checker_and_the_runtime_refuse(
    withdrawn: None, live: World, destinations: Destinations,
) -> None:
    registry = get_runtime().registry
    assert not registry.resolve("research.fetch").shareable
    refused = check_source(TEXT, registry, filename=str(FILE))
    assert isinstance(refused, Diagnostics)
    assert [d.code.value for d in refused] == ["AGL-E012"]
    workflow = parse_workflow(TEXT, filename=str(FILE))
    assert not isinstance(workflow, Diagnostics)
    forced = _issue(workflow, workflow.effects,
                    {"research.fetch": registry.resolve("research.fetch").fingerprint})
    researcher = Researcher.enrol(live, destinations.sources_url)
    run = start(researcher, forced, source=False)
    assert_refused_before_any_claim(run, "`first` and `second` both name resource")


def test_a_workflow_checked_under_the_grant_does_not_run_once_it_is_withdrawn(
    withdrawn: None, live: World, destinations: Destinations,
) -> None:
    """The grant is part of the fingerprint: a workflow checked while research.fetch granted
    shared reads pins that fingerprint, which the withdrawn contract no longer has."""
    granted = demo_contracts.research_fetch(
        get_runtime().registry.resolve("research.fetch").implementation_fingerprint)
    assert granted.shareable
    workflow = parse_workflow(TEXT, filename=str(FILE))
    assert not isinstance(workflow, Diagnostics)
    checked = _issue(workflow, workflow.effects, {"research.fetch": granted.fingerprint})
    researcher = Researcher.enrol(live, destinations.sources_url)
    with pytest.raises(WorkflowRefused) as refused:
        start(researcher, checked, source=False)
    assert refused.value.code == "contract_mismatch"
    assert "research.fetch" in str(refused.value)
    assert not Proposal.objects.filter(principal=researcher.agent).exists()


@pytest.mark.parametrize(("name", "each_iteration", "refused"), [
    ("ok/parallel_loop_fetch_one_question.yaml", True, False),
    ("err/e012_parallel_loop_attest_one_report.yaml", True, True),
    ("err/e012_parallel_attest_one_report.yaml", False, True),
    ("err/e012_parallel_fetch_and_edit.yaml", False, True),
])
def test_the_runtimes_own_check_of_lanes(name: str, each_iteration: bool, refused: bool) -> None:
    """`ownership.refuse_shared` on the lanes of each file's step, as `run_concurrent` calls it:
    a parallel loop's iterations may all name the question only through research.fetch."""
    workflow = parse_workflow((FILE.parents[1] / name).read_text(encoding="utf-8"),
                              filename=name)
    assert not isinstance(workflow, Diagnostics)
    step = workflow.steps[0]
    if isinstance(step, Loop):
        lanes = [("1", step.body), ("2", step.body)]
    else:
        assert isinstance(step, Parallel)
        lanes = [(branch.name, branch.body) for branch in step.branches]
    env = {"question": HandleValue("res_q", 1, "question"),
           "report": HandleValue("res_r", 1, "report"), "sources": ["a", "b"]}
    if not refused:
        ownership.refuse_shared(env, lanes, each_iteration=each_iteration, construct="loop")
        return
    with pytest.raises(Denial) as denied:
        ownership.refuse_shared(env, lanes, each_iteration=each_iteration, construct="parallel")
    assert denied.value.code is DenialCode.PARALLEL_CAPTURE
