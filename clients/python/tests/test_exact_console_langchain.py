"""The LangChain tools against a scripted console (`httpx.MockTransport`): what they are called
and take, the proposal a `ToolCall` makes, and the `ToolMessage` it answers for an outcome, a
refusal and a decision that did not come in time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from scripted import JSON, LOOKUP, SEND, Console, ok, proposal, refusal

from exact_console import Client
from exact_console.langchain import tools


def call(name: str, args: JSON, call_id: str = "call_7") -> ToolCall:
    return ToolCall(name=name, args=args, id=call_id, type="tool_call")


def by_name(found: list[Any]) -> dict[str, BaseTool]:
    return {t.name: t for t in found}


def test_one_basetool_per_contract_named_with_underscores_taking_its_json_schema(
        client: Client) -> None:
    found = tools(client)
    assert [t.name for t in found] == ["crm_lookup", "email_send"]
    assert all(isinstance(t, BaseTool) for t in found)
    lookup, send = found
    assert lookup.args_schema == LOOKUP["input_schema"]
    assert "Runs without an approval" in lookup.description
    assert "Needs an operator's approval" in send.description
    # What a chat model is shown: the contract's schema, under the tool's name.
    function = convert_to_openai_tool(send)["function"]
    assert function["name"] == "email_send"
    assert function["parameters"] == SEND["input_schema"]
    assert [t.name for t in tools(client, operations=["email.send"])] == ["email_send"]


def test_a_call_proposes_with_the_tool_call_id_and_answers_the_result(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None), 201))
    console.on("POST", "proposals/prp_1/dispatch/", ok({"operation_id": "op_1",
                                                        "state": "queued"}, 202))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "running"}),
               ok({"id": "op_1", "state": "completed", "result": {"name": "Ada", "tier": 2}}))
    lookup = by_name(tools(client))["crm_lookup"]
    message = lookup.invoke(call("crm_lookup", {"customer_id": "cus-001"}, "call_lookup_1"))
    assert isinstance(message, ToolMessage)
    assert console.sent("POST", "proposals/") == [{
        "operation": "crm.lookup", "arguments": {"customer_id": "cus-001"},
        "call_id": "call_lookup_1", "dispatch_on_approval": True}]
    assert message.status == "success"
    assert message.tool_call_id == "call_lookup_1"
    assert message.name == "crm_lookup"
    assert json.loads(str(message.content)) == {"name": "Ada", "tier": 2}


def test_a_granted_call_waits_for_the_operation_the_grant_dispatched(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")),
               ok(proposal("granted", "op_9")))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    send = by_name(tools(client, timeout=10))["email_send"]
    message = send.invoke(call("email_send", {"draft": {"id": "res_1", "revision": 1}}))
    assert message.status == "success"
    assert json.loads(str(message.content)) == {"message_id": "<m@x>"}
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []  # the grant dispatched it


def test_a_refused_proposal_is_the_error_text_with_its_code_never_retried(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", refusal(403, "scope_violation",
                                              "No grant covers customer cus-999."))
    lookup = by_name(tools(client))["crm_lookup"]
    message = lookup.invoke(call("crm_lookup", {"customer_id": "cus-999"}))
    assert message.status == "error"
    assert message.content == "scope_violation: No grant covers customer cus-999."
    assert message.tool_call_id == "call_7"
    assert len(console.requests) == 2  # contracts, one proposal: nothing more


def test_a_denied_approval_is_the_error_text_approval_denied(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    send = by_name(tools(client))["email_send"]
    message = send.invoke(call("email_send", {"draft": {"id": "res_1", "revision": 1}}))
    assert message.status == "error"
    assert message.content == "approval_denied: An operator denied this proposal."
    assert len(console.sent("POST", "proposals/")) == 1
    assert len(console.sent("POST", "proposals/prp_1/dispatch/")) == 1


def test_no_decision_within_the_timeout_is_the_error_text_approval_pending(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    send = by_name(tools(client, timeout=0.3))["email_send"]
    message = send.invoke(call("email_send", {"draft": {"id": "res_1", "revision": 1}}))
    assert message.status == "error"
    assert str(message.content).startswith("approval_pending: proposal prp_1: no decision")
    assert len(console.sent("POST", "proposals/")) == 1  # waited, never proposed again
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []


def test_a_dispatch_that_lost_to_the_grants_claim_follows_the_grants_operation(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("granted"), 201))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(409, "permit_claimed", "The permit was claimed."))
    console.on("GET", "proposals/prp_1/", ok(proposal("granted", "op_3")))
    console.on("GET", "operations/op_3/", ok({"id": "op_3", "state": "completed",
                                             "result": {"sent": True}}))
    send = by_name(tools(client))["email_send"]
    message = send.invoke(call("email_send", {"draft": {"id": "res_1", "revision": 1}}))
    assert message.status == "success"
    assert json.loads(str(message.content)) == {"sent": True}


def test_an_operation_that_ended_without_its_effect_is_error_text_with_its_state(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None, "op_4"), 201))
    console.on("GET", "operations/op_4/", ok({
        "id": "op_4", "state": "failed_no_effect", "result": None,
        "attempts": [{"number": 1, "error": "mailbox rejected the recipient"}]}))
    lookup = by_name(tools(client))["crm_lookup"]
    message = lookup.invoke(call("crm_lookup", {"customer_id": "cus-001"}))
    assert message.status == "error"
    assert message.content == ("failed_no_effect: operation op_4 ended failed_no_effect "
                               "(mailbox rejected the recipient)")


def test_arguments_without_a_tool_call_id_are_refused_before_any_proposal(
        console: Console, client: Client) -> None:
    lookup = by_name(tools(client))["crm_lookup"]
    with pytest.raises(ValueError, match="ToolCall"):
        lookup.invoke({"customer_id": "cus-001"})
    assert console.sent("POST", "proposals/") == []
