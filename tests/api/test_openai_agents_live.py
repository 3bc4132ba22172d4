"""An OpenAI Agents SDK agent over HTTP: a model's tool call, run by the SDK's own `Runner` with
the client's tools (`exact_console.openai_agents`), is a proposal an operator decides, and the
email is sent by the console's handler (run by the eager task queue), once; a run interrupted
after its proposal and run again with the same tool-call id proposes nothing more; a denial, and
a tool outside the agent's tool set, are what the model sees next."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, Runner

from demo.destinations.runner import list_all
from dispatch.models import Proposal
from exact_console import Client
from exact_console.openai_agents import decisions_from_console, tools
from tests.api.conftest import draft_arguments
from tests.conftest import World
from tests.support.approvers import WAIT, operator_decides, while_operator_decides
from tests.support.destinations import Destinations
from tests.support.sdk_model import ANSWER, OFFLINE, ScriptedModel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def run(agent: Client, model: ScriptedModel, *, timeout: float = WAIT,
        operations: list[str] | None = None) -> Any:
    sdk_agent = Agent(name="support", instructions="Send the customer's refund email.",
                      model=model, tools=list(tools(agent, timeout=timeout, operations=operations)))
    return Runner.run_sync(sdk_agent, "Send the refund email.", run_config=OFFLINE)


def sent_ids(destinations: Destinations) -> list[str]:
    return [m["message_id"] for m in list_all(destinations.directory)["email"]]


def test_a_tool_call_granted_by_the_operator_sends_the_email_once(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel("email_send", draft_arguments(agent), "call_send_1")
    operator, decided = operator_decides(world, "grant")

    result = while_operator_decides(operator, lambda: run(agent, model))

    assert len(decided) == 1
    assert result.final_output == ANSWER
    proposal = Proposal.objects.get(principal=world.owner)
    assert proposal.call_id == "call_send_1"
    operation_id = proposal.operation_record.id
    assert json.loads(model.answer()) == {"message_id": f"{operation_id}@console.invalid"}
    assert sent_ids(destinations) == [f"{operation_id}@console.invalid"]

    # The same run replayed, with the same tool-call id: the first proposal answers, nothing
    # more is proposed or sent.
    again = ScriptedModel("email_send", model.arguments, "call_send_1")
    run(agent, again)
    assert again.answer() == model.answer()
    assert Proposal.objects.filter(principal=world.owner).count() == 1
    assert len(sent_ids(destinations)) == 1


def test_a_run_interrupted_after_its_proposal_and_run_again_proposes_and_sends_once(
        agent: Client, world: World, destinations: Destinations) -> None:
    # The first run gives up waiting: the proposal is made, nobody has decided yet.
    model = ScriptedModel("email_send", draft_arguments(agent), "call_send_2")
    run(agent, model, timeout=0.5)
    assert model.answer().startswith("approval_pending: ")
    assert Proposal.objects.filter(principal=world.owner).count() == 1
    assert sent_ids(destinations) == []

    operator, decided = operator_decides(world, "grant")
    while_operator_decides(operator, lambda: None)
    assert len(decided) == 1

    # Run again, with the same tool-call id: the first proposal's outcome is the answer.
    again = ScriptedModel("email_send", model.arguments, "call_send_2")
    result = run(agent, again)
    assert result.final_output == ANSWER
    proposal = Proposal.objects.get(principal=world.owner)
    assert json.loads(again.answer()) == {
        "message_id": f"{proposal.operation_record.id}@console.invalid"}
    assert sent_ids(destinations) == [f"{proposal.operation_record.id}@console.invalid"]


def test_a_run_paused_by_the_sdk_resumes_from_the_consoles_decision_once(
        agent: Client, world: World, destinations: Destinations) -> None:
    # With interrupt=True the SDK's own pause stops the run after the proposal; the console's
    # decision, not the application's, approves it in the run's state.
    model = ScriptedModel("email_send", draft_arguments(agent), "call_send_3")
    sdk_agent = Agent(name="support", model=model,
                      tools=list(tools(agent, timeout=WAIT, interrupt=True)))
    first = Runner.run_sync(sdk_agent, "Send the refund email.", run_config=OFFLINE)
    [paused] = first.interruptions
    assert paused.call_id == "call_send_3"
    state = first.to_state()
    assert [i.call_id for i in decisions_from_console(agent, state)] == ["call_send_3"]
    assert sent_ids(destinations) == []

    operator, decided = operator_decides(world, "grant")
    while_operator_decides(operator, lambda: None)
    assert decisions_from_console(agent, state) == []
    resumed = Runner.run_sync(sdk_agent, state, run_config=OFFLINE)

    assert len(decided) == 1
    assert resumed.final_output == ANSWER
    proposal = Proposal.objects.get(principal=world.owner)
    assert proposal.call_id == "call_send_3"
    assert json.loads(model.answer()) == {
        "message_id": f"{proposal.operation_record.id}@console.invalid"}
    assert len(sent_ids(destinations)) == 1


def test_a_denied_tool_call_is_what_the_model_sees_next_approval_denied(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel("email_send", draft_arguments(agent), "call_send_4")
    operator, decided = operator_decides(world, "deny")

    result = while_operator_decides(operator, lambda: run(agent, model))

    assert len(decided) == 1
    assert len(model.seen) == 2  # the call, then its answer: nothing retried
    assert model.outputs(model.seen[0]) == []
    assert model.answer().startswith("approval_denied: ")
    assert result.final_output == ANSWER
    assert sent_ids(destinations) == []
    assert Proposal.objects.filter(principal=world.owner).count() == 1


def test_a_tool_outside_the_agents_tool_set_is_what_the_model_sees_tool_not_permitted(
        live_server: Any, world: World, destinations: Destinations) -> None:
    from dispatch.services.principals import agent_create

    mailer, token = agent_create(name="mailer", tenant="acme", tools=["email.send"])
    with Client(live_server.url, token) as narrow:
        # Its tools are its tool set; a program that names crm.lookup anyway gets it
        # (docs/frameworks.md), and the dispatcher refuses the model's call.
        assert [t.name for t in tools(narrow)] == ["email_send"]
        model = ScriptedModel("crm_lookup", {"customer_id": "cus-001"}, "call_lookup_1")
        result = run(narrow, model, operations=["crm.lookup", "email.send"])

    assert model.answer().startswith("tool_not_permitted: ")
    assert result.final_output == ANSWER
    assert len(model.seen) == 2
    assert not Proposal.objects.filter(principal=mailer).exists()
