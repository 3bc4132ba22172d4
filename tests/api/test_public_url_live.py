"""Every approval link handed to an agent is at the console's public address (`CONSOLE_PUBLIC_URL`),
never at the API address the agent called, when the deployment sets it: the REST proposal's
`approval.url`, the MCP gateway's `approval_url`, and the client adapters' interrupts and
deferred calls, with a `Client` and an `AsyncClient`, against a live server. Unset, the REST API
gives no link and the client builds one from its own address, as it did."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolCall
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.function import FunctionModel

from dispatch.gateway.answers import proposal_standing
from dispatch.gateway.results import pending_result
from dispatch.models import Proposal
from exact_console import AsyncClient, Client
from exact_console import langgraph as lg
from exact_console import pydantic_ai as pa
from tests.api.conftest import draft_arguments
from tests.conftest import World
from tests.support.agents import ScriptedModel, agent_graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PUBLIC = "https://console.acme.example"


def page(approval_id: str, at: str = PUBLIC) -> str:
    return f"{at}/console/approvals/{approval_id}/"


def root(agent: Client) -> str:
    """The address the agent calls: the live server's."""
    return agent.root.removesuffix("/api/v1/")


def test_the_rest_proposal_links_its_approval_at_the_public_address(
        agent: Client, world: World, settings: Any) -> None:
    settings.CONSOLE_PUBLIC_URL = PUBLIC + "/"
    proposal = agent.propose("email.send", draft_arguments(agent), call_id="c-public-1")
    approval = proposal["approval"]
    assert approval is not None
    assert approval["url"] == page(approval["id"])
    assert agent.proposal(proposal["id"])["approval"]["url"] == page(approval["id"])

    settings.CONSOLE_PUBLIC_URL = ""
    again = agent.proposal(proposal["id"])["approval"]
    assert again["url"] is None


def test_an_mcp_answer_links_the_public_address(world: World, settings: Any) -> None:
    settings.CONSOLE_PUBLIC_URL = PUBLIC
    proposal = world.propose_email(world.draft())
    standing = proposal_standing(world.owner, proposal.id, now=world.now)
    body = pending_result(standing).structured_content
    assert body["approval_url"] == page(proposal.approval.id)


@pytest.mark.parametrize("flavour", ["Client", "AsyncClient"])
def test_a_langgraph_interrupt_links_the_public_address(
        agent: Client, world: World, settings: Any, flavour: str) -> None:
    settings.CONSOLE_PUBLIC_URL = PUBLIC
    call = ToolCall(name="email_send", args=draft_arguments(agent), id="call_pub_1",
                    type="tool_call")
    ask = {"messages": [HumanMessage("Send the refund email.")]}
    if flavour == "Client":
        state = agent_graph(agent, call).run(ask)
    else:
        async def main() -> Any:
            async with AsyncClient(root(agent), world.owner_token) as client:
                graph = agent_graph(agent, call, agent_tools=await lg.atools(client))
                return await graph.graph.ainvoke(ask, graph.config)

        state = asyncio.run(main())
    [pause] = state["__interrupt__"]
    proposal = Proposal.objects.get(principal=world.owner)
    waiting = pause.value[0]["exact_console"]
    assert waiting["approval_url"] == page(proposal.approval.id)
    assert page(proposal.approval.id) in pause.value[0]["description"]


def test_a_deferred_pydantic_ai_call_links_the_public_address_and_without_it_the_clients(
        agent: Client, world: World, settings: Any) -> None:
    def deferred(call_id: str) -> dict[str, Any]:
        model = ScriptedModel(draft_arguments(agent), call_id)

        async def main() -> Any:
            async with AsyncClient(root(agent), world.owner_token) as client:
                deferring = Agent(FunctionModel(model),
                                  toolsets=[await pa.atoolset(client, deferred=True)],
                                  output_type=[str, DeferredToolRequests])
                return (await deferring.run("Send the refund email.")).output

        requests = asyncio.run(main())
        assert isinstance(requests, DeferredToolRequests)
        found: dict[str, Any] = requests.metadata[call_id]["exact_console"]
        return found

    settings.CONSOLE_PUBLIC_URL = PUBLIC
    first = deferred("call_pub_2")
    approval_id = Proposal.objects.get(id=first["proposal_id"]).approval.id
    assert first["approval_url"] == page(approval_id)

    settings.CONSOLE_PUBLIC_URL = ""
    second = deferred("call_pub_3")
    approval_id = Proposal.objects.get(id=second["proposal_id"]).approval.id
    assert second["approval_url"] == page(approval_id, root(agent))
