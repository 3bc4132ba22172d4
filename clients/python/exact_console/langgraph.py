"""The console's contracts as LangChain tools that pause a LangGraph graph while an approval is
pending, and the same as a human-in-the-loop middleware (`pip install ./clients/python[langchain]`).

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command
    from exact_console.langgraph import tools

    agent_tools = tools(console)                    # email_send, crm_lookup, ...
    ... builder.add_node("tools", ToolNode(agent_tools)) ...
    graph = builder.compile(checkpointer=InMemorySaver())   # interrupts need a checkpointer
    state = graph.invoke({"messages": [...]}, config)
    for pause in state.get("__interrupt__", ()):
        [request] = pause.value                     # an Agent Inbox `HumanInterrupt`
        print("decide at", request["exact_console"]["approval_url"])
    state = graph.invoke(Command(resume=True), config)      # once the operator has decided

A tool is the contract, as in `exact_console.langchain`: invoked with a `ToolCall` it proposes
the exact arguments with `call_id` = the call's `id` and `dispatch_on_approval`, and answers a
`ToolMessage`. It does not wait for a human: while the approval is pending it calls LangGraph's
`interrupt()`, and the graph stops there with its state saved by the checkpointer. The
interrupt's value is what LangChain's Agent Inbox reads, a list of one `HumanInterrupt`:
`[{"action_request": {"action": <tool name>, "args": <the arguments>}, "config":
{"allow_ignore", "allow_respond", "allow_edit", "allow_accept"}, "description": <where to
decide>, "exact_console": {"operation", "proposal_id", "approval_url", "tool_call_id"}}]`. Every
`allow_*` is false: the console is the only place the action is decided, so the inbox shows the
request and the console's link, and offers none of its own answers.

`Command(resume=...)` runs the interrupted node again from its start, so the tool proposes
again with the same tool-call id: the console answers the first proposal, never a second one.
The resume value is informational and ignored (an inbox's `{"type": "accept"}` included): only
the console's decision counts. A proposal still pending interrupts the graph again, and nothing
runs; a decided one is dispatched (a grant's operation is followed), waited for within
`timeout`, and answered as `exact_console.langchain` answers it: the operation's result, or the
refusal's code and message as the error text (`approval_denied` for a denial, `status="error"`).

`middleware(console)` is the human-in-the-loop middleware of LangChain's agents built on the
contracts: `wrap_tool_call` / `awrap_tool_call` answer the calls of the console's contracts (its
`.tools`, to bind to the model) and hand every other call to the agent's own tool. It pauses as
LangChain's `HumanInTheLoopMiddleware` does, with a `HITLRequest` (`{"action_requests": [{"name",
"args", "description"}], "review_configs": [{"action_name", "allowed_decisions": []}]}`, plus
`"exact_console"`), and reads a resume's `{"decisions": [...]}` as it reads any resume value:
not at all. LangChain's `langchain.agents` package is not among this package's dependencies
(the extra installs langchain-core and LangGraph), so it plugs into the hook that middleware is
built on: `ToolNode(agent_tools, wrap_tool_call=review.wrap_tool_call,
awrap_tool_call=review.awrap_tool_call)`.

The tools take a `Client` or an `AsyncClient` (`await atools(console)`, for a graph run with
`ainvoke`), as `exact_console.langchain`'s do; a console that could not be reached is the error
text `console_unreachable: ...`.

This module and `exact_console.langchain` are the only ones of the package that import
LangChain; this one alone imports LangGraph.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from exact_console import calling
from exact_console._calls import decided
from exact_console._extras import needs
from exact_console.client import AsyncClient, Client
from exact_console.langchain import ConsoleTool
from exact_console.tools import Tool
from exact_console.tools import atools as aspecs
from exact_console.tools import tools as specs

with needs(__name__, "langchain", "langgraph", "langchain_core"):
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command, interrupt

__all__ = [
    "METADATA_KEY",
    "ConsoleReview",
    "InterruptingTool",
    "ReviewedTool",
    "amiddleware",
    "atools",
    "hitl_request",
    "human_interrupt",
    "middleware",
    "pause",
    "tool",
    "tools",
]

#: The key of an interrupt's value that marks it as the console's.
METADATA_KEY = "exact_console"

#: `ToolNode` runs a step's tool calls in threads of one task, which share its interrupts: an
#: interrupt takes its index, then the resume value of that index, in two moves that another
#: thread's interrupt must not come between (LangGraph asserts their order). One at a time.
_INTERRUPTING = threading.Lock()


def pause(client: Client | AsyncClient, operation: str, proposal: Mapping[str, Any],
          call_id: str) -> dict[str, Any]:
    """What a human needs to decide a pending proposal, and where: the `exact_console` part of
    every interrupt's value."""
    return {"operation": operation, "proposal_id": proposal["id"],
            "approval_url": calling.approval_url(client, proposal), "tool_call_id": call_id}


def description(waiting: Mapping[str, Any]) -> str:
    """The interrupt's words for a human: where the action is decided, and that nothing
    answered to the interrupt decides it."""
    where = waiting["approval_url"] or "the console"
    return (f"{waiting['operation']} waits for an operator's decision in the console: {where} "
            "Only that decision counts: a resume value approves nothing, and the resumed "
            "graph reads the console's decision again.")


#: An Agent Inbox `HumanInterrupt`'s config: none of its answers is the inbox's to give.
NO_ANSWERS = {"allow_ignore": False, "allow_respond": False, "allow_edit": False,
              "allow_accept": False}


def human_interrupt(name: str, arguments: Mapping[str, Any],
                    waiting: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The value of the interrupt of a pending proposal, as LangChain's Agent Inbox reads it: a
    list of one `HumanInterrupt`, with the console's own part under `METADATA_KEY`."""
    return [{"action_request": {"action": name, "args": dict(arguments)},
             "config": dict(NO_ANSWERS), "description": description(waiting),
             METADATA_KEY: dict(waiting)}]


def hitl_request(name: str, arguments: Mapping[str, Any],
                 waiting: Mapping[str, Any]) -> dict[str, Any]:
    """The same, as LangChain's `HumanInTheLoopMiddleware` asks: a `HITLRequest` whose review
    allows no decision (the console's is the only one)."""
    return {"action_requests": [{"name": name, "args": dict(arguments),
                                 "description": description(waiting)}],
            "review_configs": [{"action_name": name, "allowed_decisions": []}],
            METADATA_KEY: dict(waiting)}


class InterruptingTool(ConsoleTool):
    """One contract as a LangChain tool that interrupts its LangGraph graph while the
    approval of its proposal is pending (see the module). Run it inside a graph compiled with a
    checkpointer, as LangGraph's `interrupt()` requires."""

    def _run(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        client = self.sync_client()
        begun = calling.begin(client, self.operation, arguments, call_id)
        while not isinstance(begun, calling.Answer) and not decided(begun):
            self._interrupt(begun, call_id, arguments)
            begun = calling.drive(client, calling.read_steps(str(begun["id"])))
        if isinstance(begun, calling.Answer):
            return self.message(begun, call_id)
        return self.message(calling.answer(client, begun, timeout=self.timeout), call_id)

    async def _arun(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        begun = await calling.abegin(self.client, self.operation, arguments, call_id)
        while not isinstance(begun, calling.Answer) and not decided(begun):
            self._interrupt(begun, call_id, arguments)
            begun = await calling.adrive(self.client, calling.read_steps(str(begun["id"])))
        if isinstance(begun, calling.Answer):
            return self.message(begun, call_id)
        return self.message(await calling.aanswer(self.client, begun, timeout=self.timeout),
                            call_id)

    def interrupt_value(self, arguments: Mapping[str, Any], waiting: Mapping[str, Any]) -> Any:
        """The interrupt's value: an Agent Inbox `HumanInterrupt` (see the module)."""
        return human_interrupt(self.name, arguments, waiting)

    def _interrupt(self, proposal: Mapping[str, Any], call_id: str,
                   arguments: Mapping[str, Any]) -> None:
        # Raises GraphInterrupt, unless this run of the node is a resume: then it returns the
        # resume value, which decides nothing. The console is read again, and a proposal still
        # pending interrupts again (the next interrupt of this node has no resume value yet).
        waiting = pause(self.client, self.operation, proposal, call_id)
        with _INTERRUPTING:
            interrupt(self.interrupt_value(arguments, waiting))


class ReviewedTool(InterruptingTool):
    """An interrupting tool whose interrupt is LangChain's `HITLRequest` (`middleware`)."""

    def interrupt_value(self, arguments: Mapping[str, Any], waiting: Mapping[str, Any]) -> Any:
        return hitl_request(self.name, arguments, waiting)


class ConsoleReview:
    """The human-in-the-loop middleware on the console's contracts (see the module): the calls
    of its `tools` are proposed to the console, paused on with a `HITLRequest` while pending,
    and answered from the console's decision; any other call goes to `handler` untouched."""

    name = "exact_console"

    def __init__(self, tools: Iterable[InterruptingTool]) -> None:
        self.tools = list(tools)
        self._by_name = {t.name: t for t in self.tools}

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
                       ) -> ToolMessage | Command[Any]:
        reviewed = self._by_name.get(request.tool_call["name"])
        if reviewed is None:
            return handler(request)
        answer: ToolMessage = reviewed.invoke(request.tool_call)
        return answer

    async def awrap_tool_call(
            self, request: ToolCallRequest,
            handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        reviewed = self._by_name.get(request.tool_call["name"])
        if reviewed is None:
            return await handler(request)
        answer: ToolMessage = await reviewed.ainvoke(request.tool_call)
        return answer


def tool(spec: Tool, client: Client | AsyncClient, *, timeout: float = 60.0,
         kind: type[InterruptingTool] = InterruptingTool) -> InterruptingTool:
    return kind(name=calling.tool_name(spec), description=spec.description,
                args_schema=spec.input_schema, client=client, operation=spec.name,
                timeout=timeout)


def tools(client: Client, *, timeout: float = 60.0,
          operations: Iterable[str] | None = None) -> list[InterruptingTool]:
    """One interrupting tool per contract of `client.contracts()` (only those named in
    `operations` when given), named as the contract with `.` replaced by `_` (`crm_lookup`).
    `timeout` (seconds) bounds the wait for the outcome once the console has decided."""
    return [tool(spec, client, timeout=timeout) for spec in specs(client, operations)]


async def atools(client: Client | AsyncClient, *, timeout: float = 60.0,
                 operations: Iterable[str] | None = None) -> list[InterruptingTool]:
    """`tools` for a graph run with `ainvoke`, of an `AsyncClient` or a `Client`."""
    return [tool(spec, client, timeout=timeout) for spec in await aspecs(client, operations)]


def middleware(client: Client, *, timeout: float = 60.0,
               operations: Iterable[str] | None = None) -> ConsoleReview:
    """The human-in-the-loop middleware of the contracts this agent may propose (only those
    named in `operations` when given): bind its `.tools` to the model, and pass its
    `wrap_tool_call` and `awrap_tool_call` to the graph's `ToolNode`."""
    return ConsoleReview(tool(spec, client, timeout=timeout, kind=ReviewedTool)
                         for spec in specs(client, operations))


async def amiddleware(client: Client | AsyncClient, *, timeout: float = 60.0,
                      operations: Iterable[str] | None = None) -> ConsoleReview:
    """`middleware` of an `AsyncClient` (whose contracts are awaited) or a `Client`."""
    return ConsoleReview(tool(spec, client, timeout=timeout, kind=ReviewedTool)
                         for spec in await aspecs(client, operations))
