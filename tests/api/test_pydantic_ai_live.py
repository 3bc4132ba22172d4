"""A Pydantic AI agent over HTTP: a model's tool call, run by the client's Pydantic AI toolset
(`exact_console.pydantic_ai`), is a proposal an operator decides, and the email is sent by the
console's handler (run by the eager task queue), once; a denial is what the model sees next.
In the deferred mode the run ends on the pending approval, among Pydantic AI's own approvals,
and resumes from the console's decision. The toolset offers only the agent's tool set."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, ToolApproved
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from demo.destinations.runner import list_all
from dispatch.models import Proposal
from exact_console import Client
from exact_console.pydantic_ai import results_from_console, toolset
from tests.api.conftest import draft_arguments
from tests.conftest import World
from tests.support.agents import ScriptedModel
from tests.support.approvers import WAIT, operator_decides, while_operator_decides
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def run(agent: Client, model: ScriptedModel) -> Any:
    return Agent(FunctionModel(model), toolsets=[toolset(agent, timeout=WAIT)]).run_sync(
        "Send the refund email.")


def test_a_tool_call_granted_by_the_operator_sends_the_email_once(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel(draft_arguments(agent), "call_send_1")
    operator, decided = operator_decides(world, "grant")

    result = while_operator_decides(operator, lambda: run(agent, model))

    assert len(decided) == 1
    assert result.output == "The refund email is handled."
    [answer] = ScriptedModel.returns(model.seen[-1])
    assert (answer.outcome, answer.tool_call_id, answer.tool_name) == (
        "success", "call_send_1", "email_send")
    operation = answer.metadata
    assert operation["state"] == "completed"
    assert answer.content == operation["result"] == {
        "message_id": f"{operation['id']}@console.invalid"}
    sent = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [f"{operation['id']}@console.invalid"]

    # The same run again, with the same tool-call id: the first proposal answers, nothing more
    # is proposed or sent.
    again = ScriptedModel(model.call.args_as_dict(), "call_send_1")
    run(agent, again)
    [repeated] = ScriptedModel.returns(again.seen[-1])
    assert (repeated.outcome, repeated.content) == ("success", answer.content)
    assert Proposal.objects.filter(principal=world.owner).count() == 1
    assert Proposal.objects.get(principal=world.owner).call_id == "call_send_1"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_denied_tool_call_is_what_the_model_sees_next_approval_denied(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel(draft_arguments(agent), "call_send_2")
    operator, decided = operator_decides(world, "deny")

    while_operator_decides(operator, lambda: run(agent, model))

    assert len(decided) == 1
    assert len(model.seen) == 2  # the call, then its answer: nothing retried
    [answer] = ScriptedModel.returns(model.seen[-1])
    assert answer.outcome == "failed"
    assert str(answer.content).startswith("approval_denied: ")
    assert answer.tool_call_id == "call_send_2"
    assert list_all(destinations.directory)["email"] == []
    assert Proposal.objects.filter(principal=world.owner).count() == 1


def test_a_deferred_run_ends_on_the_approval_and_resumes_from_the_consoles_decision(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel(draft_arguments(agent), "call_send_3")
    deferring = Agent(FunctionModel(model), toolsets=[toolset(agent, deferred=True)],
                      output_type=[str, DeferredToolRequests])

    first = deferring.run_sync("Send the refund email.")

    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    # Pydantic AI's own approval path: the call is among the run's approvals.
    assert [c.tool_call_id for c in requests.approvals] == ["call_send_3"]
    assert requests.calls == []
    pending = requests.metadata["call_send_3"]["exact_console"]
    proposal = Proposal.objects.get(principal=world.owner)
    assert pending["proposal_id"] == proposal.id
    assert pending["approval_url"].endswith(f"/console/approvals/{proposal.approval.id}/")
    assert results_from_console(agent, requests).approvals == {}  # nobody has decided yet

    operator, decided = operator_decides(world, "grant")
    while_operator_decides(operator, lambda: None)
    results = results_from_console(agent, requests, timeout=WAIT)
    assert results.approvals == {"call_send_3": ToolApproved()}
    resumed = deferring.run_sync(message_history=first.all_messages(),
                                 deferred_tool_results=results)

    assert len(decided) == 1
    assert resumed.output == "The refund email is handled."
    [answer] = ScriptedModel.returns(model.seen[-1])
    assert (answer.outcome, answer.tool_call_id) == ("success", "call_send_3")
    sent = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [answer.content["message_id"]]
    assert Proposal.objects.filter(principal=world.owner).count() == 1


def test_the_toolset_is_the_agents_tool_set(
        narrow_agent: Client, world: World, destinations: Destinations) -> None:
    # This agent's tool set leaves out payments.transfer: the model is not offered it, as the
    # MCP gateway does not list it.
    offered: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered.extend(t.name for t in info.function_tools)
        return ModelResponse(parts=[TextPart("Nothing to pay with.")])

    Agent(FunctionModel(model), toolsets=[toolset(narrow_agent, timeout=WAIT)]).run_sync(
        "Pay the supplier.")

    assert sorted(offered) == ["crm_lookup", "email_send"]
    assert sorted(toolset(narrow_agent).tools) == ["crm_lookup", "email_send"]
    assert not Proposal.objects.exists()
