"""Agent steps without `delegate` (docs/workflows.md#agent-steps-without-delegate): the embedded
agent loop under the run's own principal, held to the step's tool set, every call through the
dispatcher, journaled so that a resumed run never asks the model again for what it recorded."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from dispatch.agent import FinalAnswer, ScriptedAdapter, ToolCall, ToolSpec
from dispatch.models import (
    Delegation,
    Execution,
    Operation,
    Proposal,
    Resource,
    TranscriptEntry,
)
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.workflows import WorkflowRefused, WorkflowRun, run_workflow
from protocols.jsontypes import JSONValue
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import MAILBOX, World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

OK = Path(__file__).parent / "ok"


class Model(ScriptedAdapter):
    """A scripted model that counts the turns it is asked, records the tools it is offered,
    and can crash (the process dies) when asked its turn number `crash_at`."""

    def __init__(self, *steps: Mapping[str, JSONValue], final: JSONValue,
                 crash_at: int | None = None) -> None:
        super().__init__({"agent": "model", "steps": [*steps, {"final": json.dumps(final)}]})
        self.asked = 0
        self.offered: list[list[str]] = []
        self.crash_at = crash_at

    def next_action(self, transcript: Sequence[Mapping[str, JSONValue]],
                    tools: Sequence[ToolSpec]) -> ToolCall | FinalAnswer:
        self.asked += 1
        self.offered.append([t.name for t in tools])
        if self.asked == self.crash_at:
            raise KeyboardInterrupt("crash: the worker died while the model was thinking")
        return super().next_action(transcript, tools)


def checked(name: str) -> CheckedWorkflow:
    path = OK / name
    result = check_source(path.read_text(encoding="utf-8"), get_runtime().registry,
                          filename=str(path))
    assert isinstance(result, CheckedWorkflow), result
    return result


def run(world: World, workflow: CheckedWorkflow, agents: Mapping[str, Model],
        execution_id: str | None = None, **inputs: Any) -> WorkflowRun:
    return run_workflow(workflow, principal=world.owner, execution_id=execution_id,
                        inputs=inputs or None, agents=agents, now=world.now)


def lookup(customer: str = "cus-001") -> dict[str, JSONValue]:
    return {"call": "crm.lookup", "arguments": {"customer_id": customer}}


def agent_steps(result: WorkflowRun) -> list[Any]:
    return [o for o in result.outcomes if o.step == "agent"]


def calls(outcome: Any) -> list[tuple[str, str | None]]:
    return [(c["status"], c["code"]) for c in outcome.detail["calls"]]


def agent_input(outcome: Any) -> JSONValue:
    entry = TranscriptEntry.objects.get(execution_id=outcome.detail["agent_execution_id"],
                                        kind=TranscriptEntry.Kind.INPUT)
    return entry.payload


def test_an_agent_step_runs_under_the_run_principal_held_to_its_tool_set(world: World) -> None:
    researcher = Model(lookup(), {"call": "email.send", "arguments": {"draft": "x"}},
                       final={"tier": "gold"})
    draft = world.draft()
    result = run(world, checked("if_bool_reads_only.yaml"), {"researcher": researcher},
                 draft=draft.id, research=True)
    # The agent settles; the run then waits for the operator on its own proposal.
    assert (result.state, result.waiting_on) == ("waiting", "steps[2]"), result
    [outcome] = agent_steps(result)
    assert (outcome.status, outcome.detail["result"]) == ("completed", {"tier": "gold"})
    # A tool of the principal's yet outside the step's set is refused, and never proposed.
    assert calls(outcome) == [("completed", None), ("denied", "tool_not_permitted")]
    assert researcher.offered == [["crm.lookup"]] * 3
    agent_run = Execution.objects.get(id=outcome.detail["agent_execution_id"])
    assert agent_run.principal_id == world.owner.id and agent_run.state == "finished"
    assert outcome.detail["principal"] == world.owner.name
    assert not Delegation.objects.exists()  # no sub-agent, no child grant
    lookup_op = Operation.objects.get(proposal__operation="crm.lookup")
    assert lookup_op.state == "completed"
    assert lookup_op.proposal.principal_id == world.owner.id
    assert list(Proposal.objects.values_list("operation", flat=True).order_by(
        "created_at")) == ["crm.lookup", "email.send"]
    assert Proposal.objects.get(operation="email.send").execution_id == result.execution_id


def test_model_output_is_data_a_match_takes_its_arm_and_feeds_the_next_agent(
    world: World,
) -> None:
    classifier = Model(final={"tag": "Urgent", "reason": "the site is down"})
    escalator = Model(final="paged")
    result = run(world, checked("model_json_match.yaml"),
                 {"classifier": classifier, "escalator": escalator})
    assert result.state == "finished", result
    first, second = agent_steps(result)
    assert first.detail["result"] == {"tag": "Urgent", "reason": "the site is down"}
    assert second.detail["result"] == "paged"
    assert agent_input(second) == {"agent": "escalator", "input": {"why": "the site is down"}}
    # No tools declared: none offered.
    assert classifier.offered == [[]] and escalator.offered == [[]]


def test_an_agent_in_a_try_settles_and_its_answer_is_the_try_result(world: World) -> None:
    summarizer = Model(lookup(), final={"text": "gold customer"})
    writer = Model(final="done")
    result = run(world, checked("try_catch_reads.yaml"),
                 {"summarizer": summarizer, "writer": writer})
    assert result.state == "finished", result
    first, second = agent_steps(result)
    assert calls(first) == [("completed", None)]
    assert agent_input(second) == {"agent": "writer",
                                   "input": {"summary": {"text": "gold customer"}}}


def test_a_resumed_run_never_asks_the_model_again_for_a_journaled_step(world: World) -> None:
    workflow = checked("model_json_match.yaml")
    classifier = Model(final={"tag": "Urgent", "reason": "down"})
    with pytest.raises(KeyboardInterrupt):
        run(world, workflow, {"classifier": classifier,
                              "escalator": Model(final="paged", crash_at=1)})
    [execution] = Execution.objects.filter(adapter__startswith="workflow")
    assert classifier.asked == 1

    again, escalator = Model(final={"tag": "Urgent", "reason": "down"}), Model(final="paged")
    resumed = run(world, workflow, {"classifier": again, "escalator": escalator}, execution.id)
    assert resumed.state == "finished", resumed
    assert again.asked == 0  # the classifier's step replays from the journal
    assert escalator.asked == 1
    assert [o.detail["result"] for o in agent_steps(resumed)] == [
        {"tag": "Urgent", "reason": "down"}, "paged"]


def test_a_crash_inside_the_agent_resumes_its_loop_without_repeating_a_call(
    world: World,
) -> None:
    workflow = checked("try_catch_reads.yaml")
    with pytest.raises(KeyboardInterrupt):
        # Asked twice: the lookup (proposed, run, journaled), then it dies before answering.
        run(world, workflow, {"summarizer": Model(lookup(), final="x", crash_at=2),
                              "writer": Model(final="done")})
    [execution] = Execution.objects.filter(adapter__startswith="workflow")
    assert Operation.objects.count() == 1

    # Another script would regenerate the agent's actions: refused before any step.
    with pytest.raises(WorkflowRefused) as refused:
        run(world, workflow, {"summarizer": Model(lookup("cus-002"), final="x"),
                              "writer": Model(final="done")}, execution.id)
    assert refused.value.code == "execution_mismatch"

    summarizer = Model(lookup(), final="x")
    resumed = run(world, workflow, {"summarizer": summarizer, "writer": Model(final="done")},
                  execution.id)
    assert resumed.state == "finished", resumed
    assert summarizer.asked == 1  # only its final answer: the lookup is not asked for again
    assert Operation.objects.count() == 1
    assert calls(agent_steps(resumed)[0]) == [("completed", None)]


SENDER = f"""version: 1
name: agent-sends
effects: [human, external_write]
authority:
  - operations: [email.send]
    scope: {{mailbox: [{MAILBOX}]}}
steps:
  - agent: sender
    tools: [email.send]
    bind: answer
"""
REPORT = {"call": "resources.create", "arguments": {"kind": "report", "payload": {}}}
REPLY = {"call": "resources.create", "name": "reply", "arguments": {
    "kind": "email_draft", "payload": {"from": MAILBOX, "to": ["ada@example.com"],
                                       "subject": "Tier", "body": "Gold."}}}
SEND = {"call": "email.send", "arguments": {"draft": {"$result": "reply"}}}


def test_an_agent_call_waits_for_the_operator_and_resumes_without_asking_again(
    live: World, destinations: Destinations,
) -> None:
    workflow = check_source(SENDER, get_runtime().registry, filename="sender.yaml")
    assert isinstance(workflow, CheckedWorkflow), workflow
    first_model = Model(REPORT, REPLY, SEND, final="sent")
    first = run(live, workflow, {"sender": first_model})
    assert (first.state, first.waiting_on) == ("waiting", "steps[0]"), first
    # The resource tool is offered only for the kinds of the step's tools, and held to them.
    # (email.send is offered once a draft of the agent's exists to send.)
    assert first_model.offered == [["resources.create"], ["resources.create"],
                                   ["resources.create", "email.send"]]
    assert not Resource.objects.filter(kind="report").exists()
    proposal = Proposal.objects.get(operation="email.send")
    assert proposal.principal_id == live.owner.id
    approval_decide(approver=live.approver, approval_id=proposal.approval.id,
                    decision="grant", digest=proposal.digest, now=live.now)

    again = Model(REPORT, REPLY, SEND, final="sent")
    done = run(live, workflow, {"sender": again}, first.execution_id)
    assert done.state == "finished", done
    assert again.asked == 1  # only its final answer: its three calls are journaled
    [outcome] = agent_steps(done)
    assert calls(outcome) == [("denied", "tool_not_permitted"), ("completed", None),
                              ("completed", None)]
    assert Operation.objects.get().state == "completed"
    assert Proposal.objects.count() == 1


def test_a_bool_agent_answering_anything_else_is_denied(world: World) -> None:
    workflow = check_source("""version: 1
name: yes-or-no
effects: []
steps:
  - agent: judge
    returns: bool
    bind: ok
""", get_runtime().registry, filename="judge.yaml")
    assert isinstance(workflow, CheckedWorkflow), workflow
    result = run(world, workflow, {"judge": Model(final="maybe")})
    assert result.state == "denied"
    assert result.denial is not None and result.denial.code == "schema_invalid"


def test_the_command_runs_undelegated_agent_steps_with_scripted_models(
    world: World, tmp_path: Path,
) -> None:
    classifier, escalator = tmp_path / "classifier.json", tmp_path / "escalator.json"
    classifier.write_text(json.dumps({"agent": "classifier", "steps": [
        {"final": json.dumps({"tag": "Urgent", "reason": "down"})}]}))
    escalator.write_text(json.dumps({"agent": "escalator", "steps": [{"final": "paged"}]}))
    out = io.StringIO()
    call_command("run_workflow", str(OK / "model_json_match.yaml"), "--agent", world.owner.name,
                 "--sub-agent", f"classifier={classifier}",
                 "--sub-agent", f"escalator={escalator}", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "finished"
    assert lines[1].startswith("steps[0]: agent completed agent_execution_id=exe_")
    assert Execution.objects.filter(principal=world.owner).count() == 3  # the run, two agents
