"""The Pydantic AI toolset against a scripted console (`httpx.MockTransport`) and a scripted
model (`FunctionModel`): what the tools are called and take, the proposal a tool call makes, and
what the model sees next for an outcome, a refusal and a decision that did not come in time;
then the deferred mode, Pydantic AI's own approval path: the run ends with the pending call among
its approvals and resumes with the console's decision, never with one the program makes up."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, ToolApproved, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from scripted import JSON, LOOKUP, SEND, Console, ok, proposal, refusal

from exact_console import Client
from exact_console.pydantic_ai import results_from_console, toolset

DRAFT: JSON = {"draft": {"id": "res_1", "revision": 1}}


class Model:
    """A scripted model: its first turn calls one tool, its next answers with text. It keeps
    what it was shown (`seen`) and the tools it was offered (`offered`)."""

    def __init__(self, tool: str, args: JSON, call_id: str = "call_7") -> None:
        self.call = ToolCallPart(tool, args, tool_call_id=call_id)
        self.seen: list[list[ModelMessage]] = []
        self.offered: list[Any] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.offered = info.function_tools
        if len(self.seen) == 1:
            return ModelResponse(parts=[self.call])
        return ModelResponse(parts=[TextPart("done")])

    def returned(self) -> ToolReturnPart:
        """The one tool return the model was shown on its last turn."""
        [part] = [p for m in self.seen[-1] if isinstance(m, ModelRequest) for p in m.parts
                  if isinstance(p, ToolReturnPart)]
        return part


def run(client: Client, model: Model, **options: Any) -> Any:
    agent = Agent(FunctionModel(model), toolsets=[toolset(client, **options)])
    return agent.run_sync("Do it.")


def test_one_tool_per_contract_named_with_underscores_taking_its_json_schema(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None, "op_1"), 201))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "completed",
                                             "result": {}}))
    model = Model("crm_lookup", {"customer_id": "cus-001"})
    run(client, model)
    offered = {t.name: t for t in model.offered}
    assert list(offered) == ["crm_lookup", "email_send"]
    assert offered["crm_lookup"].parameters_json_schema == LOOKUP["input_schema"]
    assert offered["email_send"].parameters_json_schema == SEND["input_schema"]
    assert "Runs without an approval" in str(offered["crm_lookup"].description)
    assert "Needs an operator's approval" in str(offered["email_send"].description)
    only = toolset(client, operations=["email.send"])
    assert list(only.tools) == ["email_send"]


def test_a_call_proposes_with_the_tool_call_id_and_the_model_sees_the_result(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None), 201))
    console.on("POST", "proposals/prp_1/dispatch/", ok({"operation_id": "op_1",
                                                        "state": "queued"}, 202))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "running"}),
               ok({"id": "op_1", "state": "completed", "result": {"name": "Ada", "tier": 2}}))
    model = Model("crm_lookup", {"customer_id": "cus-001"}, "call_lookup_1")
    assert run(client, model).output == "done"
    assert console.sent("POST", "proposals/") == [{
        "operation": "crm.lookup", "arguments": {"customer_id": "cus-001"},
        "call_id": "call_lookup_1", "dispatch_on_approval": True}]
    returned = model.returned()
    assert (returned.tool_name, returned.tool_call_id, returned.outcome) == (
        "crm_lookup", "call_lookup_1", "success")
    assert returned.content == {"name": "Ada", "tier": 2}
    assert returned.metadata["id"] == "op_1"  # the operation, which the model is not shown


def test_a_granted_call_waits_for_the_operation_the_grant_dispatched(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")),
               ok(proposal("granted", "op_9")))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    model = Model("email_send", DRAFT)
    run(client, model, timeout=10)
    assert model.returned().content == {"message_id": "<m@x>"}
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []  # the grant dispatched it


def test_a_denial_is_the_models_failed_return_approval_denied_never_retried(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    model = Model("email_send", DRAFT)
    assert run(client, model).output == "done"
    returned = model.returned()
    assert returned.outcome == "failed"
    assert returned.content == "approval_denied: An operator denied this proposal."
    assert len(model.seen) == 2  # the model's next turn is the answer: no retry prompt
    assert len(console.sent("POST", "proposals/")) == 1
    assert len(console.sent("POST", "proposals/prp_1/dispatch/")) == 1


def test_a_refused_proposal_is_the_failed_return_with_its_code(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", refusal(403, "scope_violation",
                                              "No grant covers customer cus-999."))
    model = Model("crm_lookup", {"customer_id": "cus-999"})
    run(client, model)
    assert model.returned().content == "scope_violation: No grant covers customer cus-999."
    assert len(console.requests) == 2  # contracts, one proposal: nothing more


def test_no_decision_within_the_timeout_is_the_failed_return_approval_pending(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    model = Model("email_send", DRAFT)
    run(client, model, timeout=0.3)
    returned = model.returned()
    assert returned.outcome == "failed"
    assert str(returned.content).startswith("approval_pending: proposal prp_1: no decision")
    assert len(console.sent("POST", "proposals/")) == 1  # waited, never proposed again
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []


def test_deferred_a_pending_call_ends_the_run_and_resumes_with_the_consoles_decision(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("pending")),
               ok(proposal("granted", "op_5")))
    console.on("GET", "operations/op_5/", ok({"id": "op_5", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    model = Model("email_send", DRAFT, "call_send_3")
    agent = Agent(FunctionModel(model), toolsets=[toolset(client, deferred=True)],
                  output_type=[str, DeferredToolRequests])

    first = agent.run_sync("Send it.")
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    # An approval, as Pydantic AI's own `ApprovalRequired` makes it, not an external call.
    assert [c.tool_call_id for c in requests.approvals] == ["call_send_3"]
    assert requests.calls == []
    assert requests.kind("call_send_3") == "approval"
    assert requests.metadata["call_send_3"]["exact_console"] == {
        "operation": "email.send", "proposal_id": "prp_1",
        "approval_url": "http://console.test/console/approvals/apr_1/"}
    assert console.sent("GET", "proposals/prp_1/") == []  # it did not wait

    # Still pending at the console: nothing to resume with.
    pending = results_from_console(client, requests)
    assert (pending.approvals, pending.calls) == ({}, {})
    # Granted at the console: approved; the resumed call answers the console's outcome.
    results = results_from_console(client, requests)
    assert results.approvals == {"call_send_3": ToolApproved()}
    assert requests.remaining(results) is None
    resumed = agent.run_sync(message_history=first.all_messages(),
                             deferred_tool_results=results)
    assert resumed.output == "done"
    assert model.returned().content == {"message_id": "<m@x>"}
    assert {r["call_id"] for r in console.sent("POST", "proposals/")} == {"call_send_3"}


def test_deferred_a_denial_resumes_as_the_failed_return_approval_denied(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    model = Model("email_send", DRAFT)
    agent = Agent(FunctionModel(model), toolsets=[toolset(client, deferred=True)],
                  output_type=[str, DeferredToolRequests])
    first = agent.run_sync("Send it.")
    assert isinstance(first.output, DeferredToolRequests)
    results = results_from_console(client, first.output)
    assert results.approvals == {"call_7": ToolDenied(
        "approval_denied: An operator denied this proposal.")}
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    returned = model.returned()
    assert returned.outcome == "denied"
    assert returned.content == "approval_denied: An operator denied this proposal."


def test_deferred_an_approval_the_program_makes_up_approves_nothing(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    model = Model("email_send", DRAFT, "call_send_4")
    agent = Agent(FunctionModel(model), toolsets=[toolset(client, deferred=True, timeout=0.3)],
                  output_type=[str, DeferredToolRequests])
    first = agent.run_sync("Send it.")
    assert isinstance(first.output, DeferredToolRequests)

    # Pydantic AI's own approval, written by the program: the tool still asks the console.
    made_up = first.output.build_results(approve_all=True)
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=made_up)

    returned = model.returned()
    assert returned.outcome == "failed"
    assert str(returned.content).startswith("approval_pending: proposal prp_1: no decision")
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []
    assert not [r for r in console.requests if "operations/" in r.url.path]
