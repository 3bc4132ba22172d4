"""Each adapter given an `AsyncClient`, inside its framework's own async run; a sync `Client`
in an async run never parks a wait on asyncio's default executor; a console that cannot be
reached is the adapter's error answer (`console_unreachable`), not an exception."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest
from agents import Agent as SdkAgent
from agents import Runner
from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from pydantic_ai import Agent, DeferredToolRequests, ToolApproved
from pydantic_ai.models.function import FunctionModel
from scripted import JSON, Console, ok, proposal
from test_exact_console_openai_agents import OFFLINE, ScriptedModel
from test_exact_console_pydantic_ai import Model

from exact_console import AsyncClient, Client, Retry, calling
from exact_console import langchain as lc
from exact_console import langgraph as lg
from exact_console import openai_agents as oa
from exact_console import pydantic_ai as pa

DRAFT: JSON = {"draft": {"id": "res_1", "revision": 1}}
LOOKED_UP: JSON = {"id": "op_1", "state": "completed", "result": {"name": "Ada"}}
T = TypeVar("T")


def granted_console() -> Console:
    """A console where a lookup runs at once and a send is granted after one pending read."""
    console = Console()
    console.on("POST", "proposals/", ok(proposal(None, "op_1"), 201))
    console.on("GET", "operations/op_1/", ok(LOOKED_UP))
    return console


def with_async_client(console: Console, use: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with AsyncClient("http://console.test", "eac_agent",
                               transport=httpx.MockTransport(console)) as client:
            return await use(client)

    return asyncio.run(main())


def tool_call(name: str, args: JSON, call_id: str = "call_7") -> ToolCall:
    return ToolCall(name=name, args=args, id=call_id, type="tool_call")


# --- LangChain --------------------------------------------------------------------------------

def test_langchain_tools_take_an_async_client() -> None:
    console = granted_console()

    async def use(client: AsyncClient) -> Any:
        lookup = {t.name: t for t in await lc.atools(client)}["crm_lookup"]
        return await lookup.ainvoke(tool_call("crm_lookup", {"customer_id": "c"}))

    message = with_async_client(console, use)
    assert isinstance(message, ToolMessage)
    assert (message.status, json.loads(str(message.content))) == ("success", {"name": "Ada"})
    assert console.sent("POST", "proposals/")[0]["call_id"] == "call_7"


def test_an_async_clients_contracts_are_awaited_and_the_error_says_so() -> None:
    async def use(client: AsyncClient) -> Any:
        return lc.tools(client)  # type: ignore[arg-type]  # the mistake under test

    with pytest.raises(TypeError, match=r"await .*atools"):
        with_async_client(granted_console(), use)


def test_a_tool_of_an_async_client_invoked_synchronously_says_to_use_ainvoke() -> None:
    async def use(client: AsyncClient) -> Any:
        return await lc.atools(client)

    lookup, _ = with_async_client(granted_console(), use)
    with pytest.raises(TypeError, match="ainvoke"):
        lookup.invoke(tool_call("crm_lookup", {"customer_id": "c"}))


# --- LangGraph --------------------------------------------------------------------------------

def test_langgraph_tools_take_an_async_client_interrupt_and_resume() -> None:
    console = Console()
    console.on("POST", "proposals/", ok(proposal("pending"), 201),
               ok(proposal("granted", "op_9"), 201))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"sent": True}}))
    config: Any = {"configurable": {"thread_id": "t-1"}}

    async def use(client: AsyncClient) -> tuple[Any, Any]:
        builder = StateGraph(MessagesState)
        builder.add_node("tools", ToolNode(await lg.atools(client, timeout=5)))
        builder.add_edge(START, "tools")
        graph = builder.compile(checkpointer=InMemorySaver())
        first = await graph.ainvoke(
            {"messages": [AIMessage("", tool_calls=[tool_call("email_send", DRAFT)])]},
            config)
        return first, await graph.ainvoke(Command(resume=True), config)

    first, resumed = with_async_client(console, use)
    [pause] = first["__interrupt__"]
    assert pause.value[0]["exact_console"]["proposal_id"] == "prp_1"
    [message] = [m for m in resumed["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(message.content)) == {"sent": True}


# --- OpenAI Agents SDK ------------------------------------------------------------------------

def test_openai_agents_tools_take_an_async_client() -> None:
    console = granted_console()
    model = ScriptedModel("crm_lookup", {"customer_id": "c"}, "call_sdk_1")

    async def use(client: AsyncClient) -> Any:
        agent = SdkAgent(name="support", model=model, tools=list(await oa.atools(client)))
        return await Runner.run(agent, "Do it.", run_config=OFFLINE)

    assert with_async_client(console, use).final_output == "done"
    assert json.loads(model.returned()["output"]) == {"name": "Ada"}
    assert console.sent("POST", "proposals/")[0]["call_id"] == "call_sdk_1"


def test_openai_agents_interrupts_and_resumes_with_an_async_client() -> None:
    console = Console()
    console.on("POST", "proposals/", ok(proposal("pending"), 201),
               ok(proposal("granted", "op_9"), 201))
    console.on("GET", "proposals/prp_1/", ok(proposal("granted", "op_9")))
    console.on("GET", "operations/op_9/", ok({"id": "op_9", "state": "completed",
                                             "result": {"sent": True}}))
    model = ScriptedModel("email_send", DRAFT)

    async def use(client: AsyncClient) -> Any:
        agent = SdkAgent(name="support", model=model,
                         tools=list(await oa.atools(client, interrupt=True)))
        first = await Runner.run(agent, "Send it.", run_config=OFFLINE)
        assert first.interruptions
        state = first.to_state()
        assert await oa.adecisions_from_console(client, state) == []
        return await Runner.run(agent, state, run_config=OFFLINE)

    assert with_async_client(console, use).final_output == "done"
    assert json.loads(model.returned()["output"]) == {"sent": True}


# --- Pydantic AI ------------------------------------------------------------------------------

def test_pydantic_ai_toolset_takes_an_async_client() -> None:
    console = granted_console()
    model = Model("crm_lookup", {"customer_id": "c"})

    async def use(client: AsyncClient) -> Any:
        agent = Agent(FunctionModel(model), toolsets=[await pa.atoolset(client)])
        return await agent.run("Do it.")

    assert with_async_client(console, use).output == "done"
    assert model.returned().content == {"name": "Ada"}


def test_pydantic_ai_deferred_resumes_with_an_async_client() -> None:
    console = Console()
    console.on("POST", "proposals/", ok(proposal("pending"), 201),
               ok(proposal("granted", "op_5")))
    console.on("GET", "operations/op_5/", ok({"id": "op_5", "state": "completed",
                                             "result": {"sent": True}}))
    model = Model("email_send", DRAFT)

    async def use(client: AsyncClient) -> Any:
        agent = Agent(FunctionModel(model), toolsets=[await pa.atoolset(client, deferred=True)],
                      output_type=[str, DeferredToolRequests])
        first = await agent.run("Send it.")
        assert isinstance(first.output, DeferredToolRequests)
        assert [c.tool_call_id for c in first.output.approvals] == ["call_7"]
        results = await pa.aresults_from_console(client, first.output)
        assert results.approvals == {"call_7": ToolApproved()}
        return await agent.run(message_history=first.all_messages(),
                               deferred_tool_results=results)

    assert with_async_client(console, use).output == "done"
    assert model.returned().content == {"sent": True}


# --- a sync Client in an async run ------------------------------------------------------------

class RefusingExecutor(ThreadPoolExecutor):
    """asyncio's default executor, refusing work: what an adapter must not use for a wait."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        raise AssertionError(f"the default executor was asked to run {fn!r}")


def in_loop_without_default_executor(main: Callable[[], Awaitable[T]]) -> T:
    async def guarded() -> T:
        asyncio.get_running_loop().set_default_executor(RefusingExecutor(1))
        return await main()

    return asyncio.run(guarded())


@pytest.fixture
def sync_client() -> Iterator[tuple[Console, Client]]:
    console = granted_console()
    with Client("http://console.test", "eac_agent",
                transport=httpx.MockTransport(console)) as client:
        yield console, client


def test_a_sync_client_in_langchains_async_run_keeps_off_the_default_executor(
        sync_client: tuple[Console, Client]) -> None:
    _, client = sync_client
    lookup = lc.tools(client)[0]

    async def main() -> Any:
        return await lookup.ainvoke(tool_call("crm_lookup", {"customer_id": "c"}))

    message = in_loop_without_default_executor(main)
    assert json.loads(str(message.content)) == {"name": "Ada"}


def test_a_sync_client_in_the_agents_sdk_keeps_off_the_default_executor(
        sync_client: tuple[Console, Client]) -> None:
    _, client = sync_client
    model = ScriptedModel("crm_lookup", {"customer_id": "c"})
    agent = SdkAgent(name="support", model=model, tools=list(oa.tools(client)))

    async def main() -> Any:
        return await Runner.run(agent, "Do it.", run_config=OFFLINE)

    assert in_loop_without_default_executor(main).final_output == "done"


def test_a_sync_client_in_pydantic_ai_keeps_off_the_default_executor(
        sync_client: tuple[Console, Client]) -> None:
    _, client = sync_client
    model = Model("crm_lookup", {"customer_id": "c"})
    agent = Agent(FunctionModel(model), toolsets=[pa.toolset(client)])

    async def main() -> Any:
        return await agent.run("Do it.")

    assert in_loop_without_default_executor(main).output == "done"


# --- a console that cannot be reached -----------------------------------------------------------

def unreachable_console() -> Console:
    def refuse() -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    console = Console()
    console.on("POST", "proposals/", refuse)
    return console


def test_an_unreachable_console_is_the_tools_error_text_sync_and_async() -> None:
    console = unreachable_console()
    fast = Retry(first=0.001)
    with Client("http://console.test", "eac_agent", retry=fast,
                transport=httpx.MockTransport(console)) as client:
        message = lc.tools(client)[0].invoke(tool_call("crm_lookup", {"customer_id": "c"}))
    assert message.status == "error"
    assert str(message.content).startswith("console_unreachable: POST proposals/")

    async def use(client: AsyncClient) -> Any:
        return await calling.acall(client, "crm.lookup", {}, "call_1", timeout=5)

    async def main() -> Any:
        async with AsyncClient("http://console.test", "eac_agent", retry=fast,
                               transport=httpx.MockTransport(console)) as client:
            return await use(client)

    answer = asyncio.run(main())
    assert (answer.ok, answer.code) == (False, "console_unreachable")
    assert "ConnectError" in answer.text
