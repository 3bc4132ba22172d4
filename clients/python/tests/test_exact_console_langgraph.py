"""The LangGraph interrupt mode against a scripted console (`httpx.MockTransport`), inside a
real graph (`ToolNode`, `InMemorySaver`): a pending approval interrupts with an Agent Inbox
`HumanInterrupt` carrying the proposal's id and approval page; a resume reads the console's
decision, never the resume value (an inbox's `accept` included); a resumed node never proposes
twice. The human-in-the-loop middleware does the same through `ToolNode(wrap_tool_call=...)`
with LangChain's `HITLRequest`, and leaves the agent's other tools alone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.interrupt import HumanInterrupt, HumanInterruptConfig
from langgraph.types import Command
from scripted import JSON, Console, ok, proposal, refusal

from exact_console import AsyncClient, Client
from exact_console.langgraph import InterruptingTool, amiddleware, middleware, tools

DRAFT = {"draft": {"id": "res_1", "revision": 1}}
CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}


def graph(client: Client) -> Any:
    """START -> tools: the tool node runs the tool calls of the last AI message."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(tools(client, timeout=5)))
    builder.add_edge(START, "tools")
    return builder.compile(checkpointer=InMemorySaver())


def asking(call_id: str = "call_1") -> dict[str, Any]:
    call = ToolCall(name="email_send", args=DRAFT, id=call_id, type="tool_call")
    return {"messages": [AIMessage("", tool_calls=[call])]}


def answer(state: dict[str, Any]) -> ToolMessage:
    [message] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return message


def test_the_tools_are_the_contracts_and_interrupt(client: Client) -> None:
    found = tools(client, operations=["email.send"])
    assert [t.name for t in found] == ["email_send"]
    assert all(isinstance(t, InterruptingTool) for t in found)


def test_a_pending_approval_interrupts_with_the_proposal_and_its_page(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    state = graph(client).invoke(asking(), CONFIG)
    [pause] = state["__interrupt__"]
    [request] = pause.value  # what the Agent Inbox reads: a list of one HumanInterrupt
    assert request == {
        "action_request": {"action": "email_send", "args": DRAFT},
        "config": {"allow_ignore": False, "allow_respond": False, "allow_edit": False,
                   "allow_accept": False},
        "description": (
            "email.send waits for an operator's decision in the console: "
            "http://console.test/console/approvals/apr_1/ Only that decision counts: a resume "
            "value approves nothing, and the resumed graph reads the console's decision again."),
        "exact_console": {"operation": "email.send", "proposal_id": "prp_1",
                          "approval_url": "http://console.test/console/approvals/apr_1/",
                          "tool_call_id": "call_1"}}
    assert set(request) >= set(HumanInterrupt.__annotations__)
    assert set(request["config"]) == set(HumanInterruptConfig.__annotations__)
    assert console.sent("POST", "proposals/") == [{
        "operation": "email.send", "arguments": DRAFT, "call_id": "call_1",
        "dispatch_on_approval": True}]
    assert not [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_a_resume_after_the_grant_answers_the_operations_result(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201),
               ok(proposal("granted", "op_9"), 201))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    running = graph(client)
    assert running.invoke(asking(), CONFIG)["__interrupt__"]

    state = running.invoke(Command(resume="approve"), CONFIG)

    assert "__interrupt__" not in state
    message = answer(state)
    assert (message.status, message.tool_call_id) == ("success", "call_1")
    assert json.loads(str(message.content)) == {"message_id": "<m@x>"}
    # The node ran twice, with the same tool-call id: the console answered the first proposal.
    assert [b["call_id"] for b in console.sent("POST", "proposals/")] == ["call_1", "call_1"]
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []  # the grant dispatched it


def test_a_resume_value_without_the_consoles_decision_runs_nothing_and_interrupts_again(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    running = graph(client)
    [first] = running.invoke(asking(), CONFIG)["__interrupt__"]

    state = running.invoke(Command(resume="approve"), CONFIG)

    [again] = state["__interrupt__"]
    assert again.value == first.value
    assert again.id != first.id  # a new interrupt, waiting for its own resume
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []
    assert not [r for r in console.requests if "operations/" in r.url.path]
    assert not [m for m in state["messages"] if isinstance(m, ToolMessage)]

    # Resumed twice more, the inbox's own "accept" too, still without a decision: nothing.
    for value in ({"approved": True}, [{"type": "accept", "args": None}]):
        assert running.invoke(Command(resume=value), CONFIG)["__interrupt__"]
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []


def test_a_denial_read_on_resume_is_the_error_text_approval_denied(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("pending"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("denied")))
    console.on("POST", "proposals/prp_1/dispatch/",
               refusal(403, "approval_denied", "An operator denied this proposal."))
    running = graph(client)
    assert running.invoke(asking(), CONFIG)["__interrupt__"]

    # The resume value says "approve"; the console says denied: the console counts.
    state = running.invoke(Command(resume="approve"), CONFIG)

    assert "__interrupt__" not in state
    message = answer(state)
    assert message.status == "error"
    assert message.content == "approval_denied: An operator denied this proposal."
    assert message.artifact["code"] == "approval_denied"


def test_a_refused_proposal_answers_at_once_without_an_interrupt(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", refusal(403, "tool_not_permitted",
                                              "email.send is not in this agent's tool set."))
    state = graph(client).invoke(asking(), CONFIG)
    assert "__interrupt__" not in state
    message = answer(state)
    assert message.status == "error"
    assert str(message.content).startswith("tool_not_permitted: ")


def test_a_call_that_needs_no_approval_never_interrupts(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal(None), 201))
    console.on("POST", "proposals/prp_1/dispatch/", ok({"operation_id": "op_1",
                                                        "state": "queued"}, 202))
    console.on("GET", "operations/op_1/", ok({"id": "op_1", "state": "completed",
                                             "result": {"name": "Ada"}}))
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(tools(client, operations=["crm.lookup"])))
    builder.add_edge(START, "tools")
    call = ToolCall(name="crm_lookup", args={"customer_id": "cus-001"}, id="call_2",
                    type="tool_call")
    state = builder.compile(checkpointer=InMemorySaver()).invoke(
        {"messages": [AIMessage("", tool_calls=[call])]}, CONFIG)
    assert "__interrupt__" not in state
    assert json.loads(str(answer(state).content)) == {"name": "Ada"}


class Decisions(Console):
    """A console of several proposals, one per call id, each pending until `decided` grants
    it; a granted one's operation has completed."""

    def __init__(self) -> None:
        super().__init__()
        self.granted: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/api/v1/operations/"):
            self.requests.append(request)
            return ok({"id": path.split("/")[-2], "state": "completed",
                       "result": {"operation": path.split("/")[-2]}})
        if path == "/api/v1/proposals/":
            self.requests.append(request)
            return ok(self.proposal(json.loads(request.content)["call_id"]), 201)
        if path.startswith("/api/v1/proposals/prp_"):
            self.requests.append(request)
            return ok(self.proposal(path.split("prp_")[1].strip("/")))
        return super().__call__(request)

    def proposal(self, call_id: str) -> JSON:
        granted = call_id in self.granted
        return {"id": f"prp_{call_id}", "operation_id": f"op_{call_id}" if granted else None,
                "approval": {"id": f"apr_{call_id}",
                             "state": "granted" if granted else "pending"}}


def test_several_calls_of_one_step_pause_one_at_a_time_and_each_runs_on_its_own_grant() -> None:
    console = Decisions()
    calls = [ToolCall(name="email_send", args=DRAFT, id=f"call_{n}", type="tool_call")
             for n in (1, 2, 3)]
    with Client("http://console.test", "eac_agent",
                transport=httpx.MockTransport(console)) as client:
        running = graph(client)

        def shown(state: dict[str, Any]) -> list[str]:
            return [p.value[0]["exact_console"]["tool_call_id"]
                    for p in state.get("__interrupt__", ())]

        assert shown(running.invoke({"messages": [AIMessage("", tool_calls=calls)]},
                                    CONFIG)) == ["call_1"]
        assert shown(running.invoke(Command(resume=True), CONFIG)) == ["call_1"]
        console.granted.add("call_1")
        assert shown(running.invoke(Command(resume=True), CONFIG)) == ["call_2"]
        console.granted.update({"call_2", "call_3"})
        state = running.invoke(Command(resume=True), CONFIG)

    assert shown(state) == []
    assert [json.loads(str(m.content)) for m in state["messages"][1:]] == [
        {"operation": "op_call_1"}, {"operation": "op_call_2"}, {"operation": "op_call_3"}]
    # Every run of the node proposed each call again, always with its own id.
    proposed = [b["call_id"] for b in console.sent("POST", "proposals/")]
    assert set(proposed) == {"call_1", "call_2", "call_3"}
    assert console.sent("POST", "proposals/prp_call_1/dispatch/") == []


# --- the human-in-the-loop middleware -----------------------------------------------------------

def echo(text: str) -> str:
    """The agent's own tool, which the console does not gate."""
    return f"echo: {text}"


def reviewed_graph(client: Client) -> tuple[Any, Any]:
    review = middleware(client, timeout=5)
    own = StructuredTool.from_function(echo)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([*review.tools, own],
                                       wrap_tool_call=review.wrap_tool_call,
                                       awrap_tool_call=review.awrap_tool_call))
    builder.add_edge(START, "tools")
    return review, builder.compile(checkpointer=InMemorySaver())


def test_the_middleware_pauses_with_a_hitl_request_and_resumes_from_the_console(
        console: Console, client: Client) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201), ok(proposal("pending"), 201),
               ok(proposal("granted", "op_9"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("pending")))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"message_id": "<m@x>"}}))
    review, running = reviewed_graph(client)
    assert [t.name for t in review.tools] == ["crm_lookup", "email_send"]

    [pause] = running.invoke(asking(), CONFIG)["__interrupt__"]
    assert pause.value == {
        "action_requests": [{"name": "email_send", "args": DRAFT, "description": (
            "email.send waits for an operator's decision in the console: "
            "http://console.test/console/approvals/apr_1/ Only that decision counts: a resume "
            "value approves nothing, and the resumed graph reads the console's decision again.")}],
        "review_configs": [{"action_name": "email_send", "allowed_decisions": []}],
        "exact_console": {"operation": "email.send", "proposal_id": "prp_1",
                          "approval_url": "http://console.test/console/approvals/apr_1/",
                          "tool_call_id": "call_1"}}

    # LangChain's own answer to a HITLRequest approves nothing: still pending, paused again.
    again = running.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert again["__interrupt__"]
    assert console.sent("POST", "proposals/prp_1/dispatch/") == []

    state = running.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert "__interrupt__" not in state
    message = answer(state)
    assert (message.status, message.tool_call_id) == ("success", "call_1")
    assert json.loads(str(message.content)) == {"message_id": "<m@x>"}
    assert {b["call_id"] for b in console.sent("POST", "proposals/")} == {"call_1"}


def test_the_middleware_hands_the_agents_own_tools_to_them(
        console: Console, client: Client) -> None:
    _, running = reviewed_graph(client)
    call = ToolCall(name="echo", args={"text": "hi"}, id="call_own", type="tool_call")
    state = running.invoke({"messages": [AIMessage("", tool_calls=[call])]}, CONFIG)
    assert "__interrupt__" not in state
    assert answer(state).content == "echo: hi"
    assert console.sent("POST", "proposals/") == []


def test_the_middleware_of_an_async_client_pauses_in_an_async_run(console: Console) -> None:
    console.on("POST", "proposals/", ok(proposal("pending"), 201))

    async def main() -> Any:
        async with AsyncClient("http://console.test", "eac_agent",
                               transport=httpx.MockTransport(console)) as client:
            review = await amiddleware(client, operations=["email.send"])
            builder = StateGraph(MessagesState)
            builder.add_node("tools", ToolNode(review.tools,
                                               wrap_tool_call=review.wrap_tool_call,
                                               awrap_tool_call=review.awrap_tool_call))
            builder.add_edge(START, "tools")
            graph: Any = builder.compile(checkpointer=InMemorySaver())
            return await graph.ainvoke(asking(), CONFIG)

    [pause] = asyncio.run(main())["__interrupt__"]
    assert pause.value["review_configs"] == [{"action_name": "email_send",
                                              "allowed_decisions": []}]
    assert pause.value["exact_console"]["proposal_id"] == "prp_1"
