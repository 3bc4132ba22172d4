"""A LangGraph agent over HTTP: a chat model's tool call, run by `ToolNode` with the client's
interrupting tools (`exact_console.langgraph`), pauses the graph on the pending approval with an
Agent Inbox `HumanInterrupt` carrying the proposal's id and approval page; the graph resumes
with `Command(resume=...)`, and only the console's decision counts: the email is sent by the
console's handler (run by the eager task queue) once after a grant, and a resume value alone
runs nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.types import Command

from demo.destinations.runner import list_all
from dispatch.models import Operation, Proposal
from exact_console import Client
from tests.api.conftest import draft_arguments
from tests.conftest import World
from tests.support.agents import agent_graph
from tests.support.approvers import operator_decides, while_operator_decides
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def send_call(agent: Client, call_id: str) -> ToolCall:
    return ToolCall(name="email_send", args=draft_arguments(agent), id=call_id,
                    type="tool_call")


def send_call_args(state: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the model's one tool call in `state`."""
    [call] = [c for m in state["messages"] for c in getattr(m, "tool_calls", [])]
    return dict(call["args"])


def ask() -> dict[str, Any]:
    return {"messages": [HumanMessage("Send the refund email.")]}


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def test_the_graph_pauses_on_the_approval_and_resumes_after_the_operators_grant(
        agent: Client, world: World, destinations: Destinations) -> None:
    running = agent_graph(agent, send_call(agent, "call_send_1"))

    paused = running.run(ask())

    [pause] = paused["__interrupt__"]
    proposal = Proposal.objects.get(principal=world.owner)
    [request] = pause.value  # the Agent Inbox's HumanInterrupt
    assert request["action_request"] == {"action": "email_send",
                                         "args": send_call_args(paused)}
    assert request["config"] == {"allow_ignore": False, "allow_respond": False,
                                 "allow_edit": False, "allow_accept": False}
    assert request["exact_console"] == {
        "operation": "email.send", "proposal_id": proposal.id,
        "approval_url": f"{agent.root.removesuffix('/api/v1/')}/console/approvals/"
                        f"{proposal.approval.id}/",
        "tool_call_id": "call_send_1"}
    assert request["exact_console"]["approval_url"] in request["description"]
    assert proposal.call_id == "call_send_1"
    assert tool_messages(paused["messages"]) == []
    assert list_all(destinations.directory)["email"] == []

    operator, decided = operator_decides(world, "grant")
    while_operator_decides(operator, lambda: None)
    resumed = running.run(Command(resume="approved"))

    assert len(decided) == 1
    assert "__interrupt__" not in resumed
    [answer] = tool_messages(resumed["messages"])
    assert (answer.status, answer.tool_call_id, answer.name) == (
        "success", "call_send_1", "email_send")
    operation = answer.artifact
    assert operation["state"] == "completed"
    assert json.loads(str(answer.content)) == operation["result"] == {
        "message_id": f"{operation['id']}@console.invalid"}
    assert running.seen[-1][-1] == answer  # the model's next turn is shown the result
    assert resumed["messages"][-1].content == "The refund email is handled."
    sent = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [f"{operation['id']}@console.invalid"]
    # The tool node ran twice with the same tool-call id: one proposal.
    assert Proposal.objects.filter(principal=world.owner).count() == 1


def test_a_resume_value_without_the_consoles_decision_runs_nothing_then_a_denial_reaches_the_model(
        agent: Client, world: World, destinations: Destinations) -> None:
    running = agent_graph(agent, send_call(agent, "call_send_2"))
    [first] = running.run(ask())["__interrupt__"]

    # The graph's own resume says "accept", as the Agent Inbox would; nobody at the console has
    # decided.
    again = running.run(Command(resume=[{"type": "accept", "args": None}]))

    [second] = again["__interrupt__"]
    assert second.value == first.value
    assert tool_messages(again["messages"]) == []
    assert not Operation.objects.exists()
    assert list_all(destinations.directory)["email"] == []
    assert Proposal.objects.get(principal=world.owner).approval.state == "pending"
    assert len(running.seen) == 1  # the model was not asked again

    operator, decided = operator_decides(world, "deny")
    while_operator_decides(operator, lambda: None)
    denied = running.run(Command(resume="approve"))

    assert len(decided) == 1
    assert "__interrupt__" not in denied
    [answer] = tool_messages(denied["messages"])
    assert answer.status == "error"
    assert str(answer.content).startswith("approval_denied: ")
    assert answer.tool_call_id == "call_send_2"
    assert running.seen[-1][-1] == answer  # the model's next turn is shown the denial
    assert not Operation.objects.exists()
    assert list_all(destinations.directory)["email"] == []
    assert Proposal.objects.filter(principal=world.owner).count() == 1
