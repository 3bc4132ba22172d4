"""The OpenAI Agents SDK tools against a scripted console (`httpx.MockTransport`) and a scripted
model (the SDK's `Model` interface), run by the SDK's own `Runner`: what the tools are called
and take, the proposal a tool call makes with the SDK's tool-call id, and what the model sees
next for an outcome, a refusal and a decision that did not come in time; then the interrupting
mode, whose run stops on the pending approval and resumes with the console's decision."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    RunState,
    Usage,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models.interface import ModelTracing
from agents.testing import assistant_message, function_call
from agents.tool import Tool as SdkTool
from scripted import JSON, LOOKUP, SEND, Console, ok, proposal, refusal

from exact_console import Client
from exact_console.openai_agents import decisions_from_console, tools

DRAFT: JSON = {"draft": {"id": "res_1", "revision": 1}}
#: No traces leave the test: the SDK would export them to its vendor.
OFFLINE = RunConfig(tracing_disabled=True)


class ScriptedModel(Model):
    """A scripted model: its first turn calls one tool, its next answers with text. It keeps the
    input of each turn (`seen`) and the tools it was offered (`offered`)."""

    def __init__(self, tool: str, args: JSON, call_id: str = "call_7") -> None:
        self.call = function_call(tool, args, call_id=call_id)
        self.seen: list[list[Any]] = []
        self.offered: list[SdkTool] = []

    async def get_response(self, system_instructions: str | None,
                           input: str | list[TResponseInputItem],
                           model_settings: ModelSettings, tools: list[SdkTool],
                           output_schema: AgentOutputSchemaBase | None,
                           handoffs: list[Handoff], tracing: ModelTracing, *,
                           previous_response_id: str | None, conversation_id: str | None,
                           prompt: Any) -> ModelResponse:
        self.seen.append(copy.deepcopy(list(input)) if isinstance(input, list) else [input])
        self.offered = list(tools)
        output = [self.call] if len(self.seen) == 1 else [assistant_message("done")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, system_instructions: str | None,
                        input: str | list[TResponseInputItem], model_settings: ModelSettings,
                        tools: list[SdkTool], output_schema: AgentOutputSchemaBase | None,
                        handoffs: list[Handoff], tracing: ModelTracing, *,
                        previous_response_id: str | None, conversation_id: str | None,
                        prompt: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the agent unstreamed")

    def returned(self) -> dict[str, Any]:
        """The one tool output the model was shown on its last turn."""
        [item] = [i for i in self.seen[-1]
                  if isinstance(i, dict) and i.get("type") == "function_call_output"]
        return dict(item)


def run(client: Client, model: ScriptedModel, **options: Any) -> Any:
    agent = Agent(name="support", model=model, tools=list(tools(client, **options)))
    return Runner.run_sync(agent, "Do it.", run_config=OFFLINE)


def test_one_function_tool_per_contract_named_with_underscores_taking_its_json_schema(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None, "op_1"), 201))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "completed",
                                             "result": {}}))
    found = tools(client)
    assert [t.name for t in found] == ["crm_lookup", "email_send"]
    assert all(isinstance(t, FunctionTool) for t in found)
    lookup, send = found
    assert lookup.params_json_schema == LOOKUP["input_schema"]
    assert send.params_json_schema == SEND["input_schema"]
    assert (lookup.strict_json_schema, lookup.needs_approval, send.needs_approval) == (
        False, False, False)  # the console validates, and the console is the approver
    assert "Runs without an approval" in lookup.description
    assert "Needs an operator's approval" in send.description
    assert [t.name for t in tools(client, operations=["email.send"])] == ["email_send"]
    # What the model is offered in a run: the same tools.
    model = ScriptedModel("crm_lookup", {"customer_id": "cus-001"})
    run(client, model)
    offered = {t.name: t for t in model.offered if isinstance(t, FunctionTool)}
    assert list(offered) == ["crm_lookup", "email_send"]
    assert offered["email_send"].params_json_schema == SEND["input_schema"]


def test_a_call_proposes_with_the_sdks_tool_call_id_and_the_model_sees_the_result(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None), 201))
    console.on("POST", "proposals/prp_1/dispatch/", ok({"operation_id": "op_1",
                                                        "state": "queued"}, 202))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "running"}),
               ok({"id": "op_1", "state": "completed", "result": {"name": "Ada", "tier": 2}}))
    model = ScriptedModel("crm_lookup", {"customer_id": "cus-001"}, "call_lookup_1")
    assert run(client, model).final_output == "done"
    assert console.sent("POST", "proposals/") == [{
        "operation": "crm.lookup", "arguments": {"customer_id": "cus-001"},
        "call_id": "call_lookup_1", "dispatch_on_approval": True}]
    returned = model.returned()
    assert returned["call_id"] == "call_lookup_1"
    assert json.loads(returned["output"]) == {"name": "Ada", "tier": 2}


def test_a_granted_call_waits_for_the_operation_the_grant_dispatched(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")),
               ok(proposal("granted", "op_9")))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    model = ScriptedModel("email_send", DRAFT)
    run(client, model, timeout=10)
    assert json.loads(model.returned()["output"]) == {"message_id": "<m@x>"}
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []  # the grant dispatched it


def test_a_denial_is_the_tools_error_text_approval_denied_never_retried(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    model = ScriptedModel("email_send", DRAFT)
    assert run(client, model).final_output == "done"
    returned = model.returned()
    assert (returned["call_id"], returned["output"]) == (
        "call_7", "approval_denied: An operator denied this proposal.")
    assert len(model.seen) == 2  # the model's next turn is the answer: no retry
    assert len(console.sent("POST", "proposals/")) == 1
    assert len(console.sent("POST", "proposals/prp_1/dispatch/")) == 1


def test_a_refused_proposal_is_the_error_text_with_its_code(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", refusal(403, "scope_violation",
                                              "No grant covers customer cus-999."))
    model = ScriptedModel("crm_lookup", {"customer_id": "cus-999"})
    run(client, model)
    assert model.returned()["output"] == "scope_violation: No grant covers customer cus-999."
    assert len(console.requests) == 2  # contracts, one proposal: nothing more


def test_no_decision_within_the_timeout_is_the_error_text_approval_pending(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    model = ScriptedModel("email_send", DRAFT)
    run(client, model, timeout=0.3)
    assert str(model.returned()["output"]).startswith(
        "approval_pending: proposal prp_1: no decision")
    assert len(model.seen) == 2
    assert len(console.sent("POST", "proposals/")) == 1  # waited, never proposed again
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []


def test_arguments_that_are_not_a_json_object_are_error_text_before_any_proposal(
        console: Console, client: Client) -> None:
    model = ScriptedModel("crm_lookup", {})
    model.call = function_call("crm_lookup", "[1, 2]", call_id="call_7")
    run(client, model)
    assert model.returned()["output"] == "schema_invalid: the arguments must be a JSON object"
    assert console.sent("POST", "proposals/") == []


def test_interrupt_a_pending_call_stops_the_run_and_resumes_with_the_consoles_grant(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("pending")),
               ok(proposal("granted", "op_5")))
    console.on("GET", "operations/op_5/", ok({"id": "op_5", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    model = ScriptedModel("email_send", DRAFT, "call_send_3")
    agent = Agent(name="support", model=model, tools=list(tools(client, interrupt=True)))

    first = Runner.run_sync(agent, "Send it.", run_config=OFFLINE)
    [pending] = first.interruptions
    assert (pending.tool_name, pending.call_id) == ("email_send", "call_send_3")
    assert console.sent("POST", "proposals/")[0]["call_id"] == "call_send_3"  # proposed
    assert console.sent("GET", "proposals/prp_1/") == []  # it did not wait

    # The paused run, saved and restored as another process would.
    state = asyncio.run(RunState.from_string(agent, first.to_state().to_string()))
    # Still pending at the console: nothing is approved.
    assert [i.call_id for i in decisions_from_console(client, state)] == ["call_send_3"]
    # Granted at the console: the call is approved, and the resumed tool answers the outcome.
    assert decisions_from_console(client, state) == []
    resumed = Runner.run_sync(agent, state, run_config=OFFLINE)
    assert resumed.final_output == "done"
    assert json.loads(model.returned()["output"]) == {"message_id": "<m@x>"}
    assert {r["call_id"] for r in console.sent("POST", "proposals/")} == {"call_send_3"}


def test_interrupt_a_denial_resumes_as_the_error_text_approval_denied(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    model = ScriptedModel("email_send", DRAFT)
    agent = Agent(name="support", model=model, tools=list(tools(client, interrupt=True)))
    first = Runner.run_sync(agent, "Send it.", run_config=OFFLINE)
    state = first.to_state()
    assert decisions_from_console(client, state) == []
    Runner.run_sync(agent, state, run_config=OFFLINE)
    assert model.returned()["output"] == "approval_denied: An operator denied this proposal."


def test_interrupt_an_sdk_side_approval_still_waits_for_the_consoles_decision(
        console: Console, client: Client) -> None:
    # The application approves in the SDK without asking the console: the tool runs, and it
    # still waits for the console's decision, which does not come; nothing is dispatched.
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("pending")))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    model = ScriptedModel("email_send", DRAFT)
    agent = Agent(name="support", model=model,
                  tools=list(tools(client, timeout=0.3, interrupt=True)))
    first = Runner.run_sync(agent, "Send it.", run_config=OFFLINE)
    state = first.to_state()
    [pending] = first.interruptions
    state.approve(pending)
    Runner.run_sync(agent, state, run_config=OFFLINE)
    assert str(model.returned()["output"]).startswith("approval_pending: ")
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []
    assert {r["call_id"] for r in console.sent("POST", "proposals/")} == {"call_7"}


def test_interrupt_a_refused_proposal_is_the_error_text_proposed_once(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", refusal(403, "scope_violation",
                                              "No grant covers mailbox ops@example.com."))
    model = ScriptedModel("email_send", DRAFT)
    agent = Agent(name="support", model=model, tools=list(tools(client, interrupt=True)))
    result = Runner.run_sync(agent, "Send it.", run_config=OFFLINE)
    assert result.interruptions == []  # nothing for a human to decide
    assert model.returned()["output"] == (
        "scope_violation: No grant covers mailbox ops@example.com.")
    assert len(console.sent("POST", "proposals/")) == 1
