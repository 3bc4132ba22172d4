"""The frameworks' own human-in-the-loop conventions, bridged, over HTTP against a live server
with a `Client` and an `AsyncClient`: every adapter offers only the agent's tool set (`GET
contracts/?permitted=true`, what the MCP gateway lists); a LangGraph graph pauses with an Agent
Inbox `HumanInterrupt`, the human-in-the-loop middleware with LangChain's `HITLRequest`, and
Pydantic AI's run with its own approvals; and in each only the console's decision counts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from pydantic_ai import Agent, DeferredToolRequests, ToolApproved
from pydantic_ai.models.function import FunctionModel

from demo.destinations.runner import list_all
from dispatch.models import Operation, Proposal
from exact_console import AsyncClient, Client
from exact_console import langchain as lc
from exact_console import langgraph as lg
from exact_console import openai_agents as oa
from exact_console import pydantic_ai as pa
from exact_console import tools as specs
from tests.api.conftest import draft_arguments
from tests.conftest import World
from tests.support.agents import ScriptedModel
from tests.support.approvers import WAIT, operator_decides, while_operator_decides
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

T = TypeVar("T")
CONFIG: Any = {"configurable": {"thread_id": "conventions-1"}}
NARROW = ["crm_lookup", "email_send"]


def with_async(url: str, token: str, use: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with AsyncClient(url, token, timeout=60) as client:
            return await use(client)

    return asyncio.run(main())


def token_of(client: Client) -> str:
    return str(client._http.headers["Authorization"]).removeprefix("Bearer ")


def url_of(client: Client) -> str:
    return client.root.removesuffix("/api/v1/")


# --- only the agent's tool set ----------------------------------------------------------------

def test_permitted_contracts_are_the_tool_set_and_every_adapter_offers_only_them(
        narrow_agent: Client) -> None:
    everything = [c["name"] for c in narrow_agent.contracts()["results"]]
    assert "payments.transfer" in everything
    permitted = narrow_agent.contracts(permitted=True)["results"]
    assert sorted(c["name"] for c in permitted) == ["crm.lookup", "email.send"]

    assert sorted(t.name for t in specs(narrow_agent)) == ["crm.lookup", "email.send"]
    # Named explicitly, a contract comes from all the console's (docs/frameworks.md): the
    # dispatcher, not the listing, refuses what the agent may not propose.
    assert [t.name for t in specs(narrow_agent, ["payments.transfer"])] == ["payments.transfer"]
    assert sorted(t.name for t in lc.tools(narrow_agent)) == NARROW
    assert sorted(t.name for t in lg.tools(narrow_agent)) == NARROW
    assert sorted(t.name for t in lg.middleware(narrow_agent).tools) == NARROW
    assert sorted(t.name for t in oa.tools(narrow_agent)) == NARROW
    assert sorted(pa.toolset(narrow_agent).tools) == NARROW

    async def use(client: AsyncClient) -> list[list[str]]:
        return [sorted(t.name for t in await lc.atools(client)),
                sorted(t.name for t in await lg.atools(client)),
                sorted(t.name for t in (await lg.amiddleware(client)).tools),
                sorted(t.name for t in await oa.atools(client)),
                sorted((await pa.atoolset(client)).tools)]

    assert with_async(url_of(narrow_agent), token_of(narrow_agent), use) == [NARROW] * 5


def test_permitted_takes_true_or_false_only(narrow_agent: Client) -> None:
    answer = httpx.get(f"{narrow_agent.root}contracts/?permitted=yes",
                       headers={"Authorization": f"Bearer {token_of(narrow_agent)}"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "malformed_request"


# --- LangGraph: the Agent Inbox's HumanInterrupt, and the middleware's HITLRequest -------------

def graph_of(agent_tools: list[Any], call: ToolCall, review: lg.ConsoleReview | None = None,
             ) -> Any:
    """The model calls `call`, then, shown the tool's message, answers with text."""
    model = FakeMessagesListChatModel(responses=[AIMessage("", tool_calls=[call]),
                                                 AIMessage("The refund email is handled.")])

    def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node = ToolNode(agent_tools) if review is None else ToolNode(
        agent_tools, wrap_tool_call=review.wrap_tool_call, awrap_tool_call=review.awrap_tool_call)
    builder = StateGraph(MessagesState)
    builder.add_node("model", think)
    builder.add_node("tools", node)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


def send(agent: Client, call_id: str) -> ToolCall:
    return ToolCall(name="email_send", args=draft_arguments(agent), id=call_id,
                    type="tool_call")


def answered(state: dict[str, Any]) -> ToolMessage:
    [message] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return message


def assert_sent_once(state: dict[str, Any], world: World, destinations: Destinations) -> None:
    assert "__interrupt__" not in state
    message = answered(state)
    assert message.status == "success", message.content
    operation = Operation.objects.get()
    assert json.loads(str(message.content)) == operation.result
    assert [m["message_id"] for m in list_all(destinations.directory)["email"]] == [
        operation.result["message_id"]]
    assert Proposal.objects.filter(principal=world.owner).count() == 1


@pytest.mark.parametrize("flavour", ["Client", "AsyncClient"])
def test_a_graph_pauses_with_an_agent_inbox_interrupt_and_only_the_console_decides(
        agent: Client, world: World, destinations: Destinations, flavour: str) -> None:
    call = send(agent, "call_inbox_1")
    ask = {"messages": [HumanMessage("Send the refund email.")]}
    operator, decided = operator_decides(world, "grant")

    if flavour == "Client":
        graph = graph_of(lg.tools(agent, timeout=WAIT), call)
        paused = graph.invoke(ask, CONFIG)
        again = graph.invoke(Command(resume=[{"type": "accept", "args": None}]), CONFIG)
        while_operator_decides(operator, lambda: None)
        resumed = graph.invoke(Command(resume=True), CONFIG)
    else:
        async def use(client: AsyncClient) -> tuple[dict[str, Any], ...]:
            graph = graph_of(await lg.atools(client, timeout=WAIT), call)
            loop = asyncio.get_running_loop()
            results = []
            for task in (ask, Command(resume=[{"type": "accept", "args": None}])):
                results.append(await graph.ainvoke(task, CONFIG))
            await loop.run_in_executor(None, while_operator_decides, operator, lambda: None)
            results.append(await graph.ainvoke(Command(resume=True), CONFIG))
            return tuple(results)

        paused, again, resumed = with_async(url_of(agent), token_of(agent), use)

    [pause] = paused["__interrupt__"]
    [request] = pause.value
    proposal = Proposal.objects.get(principal=world.owner)
    assert request["action_request"] == {"action": "email_send", "args": call["args"]}
    assert not any(request["config"].values())
    assert request["exact_console"]["proposal_id"] == proposal.id
    # The inbox's own "accept" approved nothing: paused again, nothing ran.
    [second] = again["__interrupt__"]
    assert second.value == pause.value
    assert len(decided) == 1
    assert_sent_once(resumed, world, destinations)


@pytest.mark.parametrize("flavour", ["Client", "AsyncClient"])
def test_the_middleware_pauses_with_a_hitl_request_and_only_the_console_decides(
        agent: Client, world: World, destinations: Destinations, flavour: str) -> None:
    call = send(agent, "call_hitl_1")
    ask = {"messages": [HumanMessage("Send the refund email.")]}
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    operator, decided = operator_decides(world, "grant")

    if flavour == "Client":
        review = lg.middleware(agent, timeout=WAIT)
        graph = graph_of(review.tools, call, review)
        paused = graph.invoke(ask, CONFIG)
        again = graph.invoke(approve, CONFIG)
        while_operator_decides(operator, lambda: None)
        resumed = graph.invoke(approve, CONFIG)
    else:
        async def use(client: AsyncClient) -> tuple[dict[str, Any], ...]:
            review = await lg.amiddleware(client, timeout=WAIT)
            graph = graph_of(review.tools, call, review)
            first = await graph.ainvoke(ask, CONFIG)
            second = await graph.ainvoke(approve, CONFIG)
            await asyncio.get_running_loop().run_in_executor(
                None, while_operator_decides, operator, lambda: None)
            return first, second, await graph.ainvoke(approve, CONFIG)

        paused, again, resumed = with_async(url_of(agent), token_of(agent), use)

    [pause] = paused["__interrupt__"]
    proposal = Proposal.objects.get(principal=world.owner)
    assert pause.value["action_requests"][0]["name"] == "email_send"
    assert pause.value["action_requests"][0]["args"] == call["args"]
    assert pause.value["review_configs"] == [{"action_name": "email_send",
                                              "allowed_decisions": []}]
    assert pause.value["exact_console"]["proposal_id"] == proposal.id
    # LangChain's own "approve" approved nothing: paused again, nothing ran.
    assert again["__interrupt__"][0].value == pause.value
    assert len(decided) == 1
    assert_sent_once(resumed, world, destinations)


# --- Pydantic AI: its own approvals ----------------------------------------------------------

def test_pydantic_ai_approvals_resume_from_the_consoles_decision_with_an_async_client(
        agent: Client, world: World, destinations: Destinations) -> None:
    model = ScriptedModel(draft_arguments(agent), "call_send_async")
    operator, decided = operator_decides(world, "grant")
    made_up: list[Any] = []

    async def use(client: AsyncClient) -> Any:
        # A short wait: the made-up approval below waits for the console that long.
        deferring = Agent(FunctionModel(model),
                          toolsets=[await pa.atoolset(client, timeout=3.0, deferred=True)],
                          output_type=[str, DeferredToolRequests])
        first = await deferring.run("Send the refund email.")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        assert [c.tool_call_id for c in requests.approvals] == ["call_send_async"]
        assert (await pa.aresults_from_console(client, requests)).approvals == {}
        # Approved by the program alone: the tool asks the console, which has not decided.
        await deferring.run(message_history=first.all_messages(),
                            deferred_tool_results=requests.build_results(approve_all=True))
        made_up.extend(ScriptedModel.returns(model.seen[-1]))
        await asyncio.get_running_loop().run_in_executor(
            None, while_operator_decides, operator, lambda: None)
        results = await pa.aresults_from_console(client, requests)
        assert results.approvals == {"call_send_async": ToolApproved()}
        return await deferring.run(message_history=first.all_messages(),
                                   deferred_tool_results=results)

    resumed = with_async(url_of(agent), token_of(agent), use)
    [pending] = made_up
    assert (pending.outcome, str(pending.content).split(":")[0]) == ("failed", "approval_pending")
    assert len(decided) == 1
    assert resumed.output == "The refund email is handled."
    [answer] = ScriptedModel.returns(model.seen[-1])
    assert answer.outcome == "success"
    sent = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in sent] == [answer.content["message_id"]]
    assert Proposal.objects.filter(principal=world.owner).count() == 1
