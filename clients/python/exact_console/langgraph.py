"""The console's contracts as LangChain tools that pause a LangGraph graph while an approval is
pending (`pip install ./clients/python[langchain]`).

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command
    from exact_console.langgraph import tools

    agent_tools = tools(console)                    # email_send, crm_lookup, ...
    ... builder.add_node("tools", ToolNode(agent_tools)) ...
    graph = builder.compile(checkpointer=InMemorySaver())   # interrupts need a checkpointer
    state = graph.invoke({"messages": [...]}, config)
    for pause in state.get("__interrupt__", ()):
        print("decide at", pause.value["exact_console"]["approval_url"])
    state = graph.invoke(Command(resume=True), config)      # once the operator has decided

A tool is the contract, as in `exact_console.langchain`: invoked with a `ToolCall` it proposes
the exact arguments with `call_id` = the call's `id` and `dispatch_on_approval`, and answers a
`ToolMessage`. It does not wait for a human: while the approval is pending it calls LangGraph's
`interrupt()` with `{"exact_console": {"operation", "proposal_id", "approval_url",
"tool_call_id"}}`, and the graph stops there with its state saved by the checkpointer.

`Command(resume=...)` runs the interrupted node again from its start, so the tool proposes
again with the same tool-call id: the console answers the first proposal, never a second one.
The resume value is ignored: only the console's decision counts. A proposal still pending
interrupts the graph again, and nothing runs; a decided one is dispatched (a grant's operation
is followed), waited for within `timeout`, and answered as `exact_console.langchain` answers it:
the operation's result, or the refusal's code and message as the error text (`approval_denied`
for a denial, `status="error"`).

The tools take a `Client` or an `AsyncClient` (`await atools(console)`, for a graph run with
`ainvoke`), as `exact_console.langchain`'s do; a console that could not be reached is the error
text `console_unreachable: ...`.

This module and `exact_console.langchain` are the only ones of the package that import
LangChain; this one alone imports LangGraph.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
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
    from langgraph.types import interrupt

__all__ = ["METADATA_KEY", "InterruptingTool", "atools", "pause", "tool", "tools"]

#: The key of an interrupt's value that marks it as the console's.
METADATA_KEY = "exact_console"

#: `ToolNode` runs a step's tool calls in threads of one task, which share its interrupts: an
#: interrupt takes its index, then the resume value of that index, in two moves that another
#: thread's interrupt must not come between (LangGraph asserts their order). One at a time.
_INTERRUPTING = threading.Lock()


def pause(client: Client | AsyncClient, operation: str, proposal: Mapping[str, Any],
          call_id: str) -> dict[str, Any]:
    """The value of the interrupt of a pending proposal: what a human needs to decide it."""
    return {METADATA_KEY: {"operation": operation, "proposal_id": proposal["id"],
                           "approval_url": calling.approval_url(client, proposal),
                           "tool_call_id": call_id}}


class InterruptingTool(ConsoleTool):
    """One contract as a LangChain tool that interrupts its LangGraph graph while the
    approval of its proposal is pending (see the module). Run it inside a graph compiled with a
    checkpointer, as LangGraph's `interrupt()` requires."""

    def _run(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        client = self.sync_client()
        begun = calling.begin(client, self.operation, arguments, call_id)
        while not isinstance(begun, calling.Answer) and not decided(begun):
            self._interrupt(begun, call_id)
            begun = calling.drive(client, calling.read_steps(str(begun["id"])))
        if isinstance(begun, calling.Answer):
            return self.message(begun, call_id)
        return self.message(calling.answer(client, begun, timeout=self.timeout), call_id)

    async def _arun(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        begun = await calling.abegin(self.client, self.operation, arguments, call_id)
        while not isinstance(begun, calling.Answer) and not decided(begun):
            self._interrupt(begun, call_id)
            begun = await calling.adrive(self.client, calling.read_steps(str(begun["id"])))
        if isinstance(begun, calling.Answer):
            return self.message(begun, call_id)
        return self.message(await calling.aanswer(self.client, begun, timeout=self.timeout),
                            call_id)

    def _interrupt(self, proposal: Mapping[str, Any], call_id: str) -> None:
        # Raises GraphInterrupt, unless this run of the node is a resume: then it returns the
        # resume value, which decides nothing. The console is read again, and a proposal still
        # pending interrupts again (the next interrupt of this node has no resume value yet).
        with _INTERRUPTING:
            interrupt(pause(self.client, self.operation, proposal, call_id))


def tool(spec: Tool, client: Client | AsyncClient, *,
         timeout: float = 60.0) -> InterruptingTool:
    return InterruptingTool(name=calling.tool_name(spec), description=spec.description,
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
