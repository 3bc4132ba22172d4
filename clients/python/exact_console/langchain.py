"""The console's contracts as LangChain tools (`pip install ./clients/python[langchain]`).

    from exact_console import Client
    from exact_console.langchain import tools

    with Client("http://127.0.0.1:8000", token) as console:
        agent_tools = tools(console, timeout=600)     # email_send, crm_lookup, ...
        message = agent_tools[0].invoke(tool_call)    # a ToolCall from the model

    async with AsyncClient("http://127.0.0.1:8000", token) as console:
        agent_tools = await atools(console, timeout=600)
        message = await agent_tools[0].ainvoke(tool_call)

A tool is the contract, nothing more: invoking it with a `ToolCall` proposes the exact
arguments with `call_id` = the call's `id` and `dispatch_on_approval`, waits for the human's
decision and the operation's outcome, and answers a `ToolMessage`. The effect runs in the
console's handler, behind its dispatcher, never in the agent's process. A refusal (the code and
message of the console's denial) and a wait past the timeout (`approval_pending`) come back to
the model as the message's error text (`status="error"`); the tool never raises them and never
tries again. Invoking it again with the same tool-call id (a resumed or replayed run) answers
from the first proposal: the console never makes a second one. A console that could not be
reached (after the client's retries) is the error text `console_unreachable: ...`.

A tool of a `Client` runs with `invoke` and with `ainvoke` (then the wait runs on a thread of
its own, never on asyncio's default executor); a tool of an `AsyncClient` runs with `ainvoke`.

This module is the only one of the package that imports LangChain.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from exact_console import calling
from exact_console._extras import needs
from exact_console.client import AsyncClient, Client
from exact_console.tools import Tool
from exact_console.tools import atools as aspecs
from exact_console.tools import tools as specs

with needs(__name__, "langchain", "langchain_core"):
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool

__all__ = ["ConsoleTool", "atools", "tools"]


class ConsoleTool(BaseTool):
    """One contract as a LangChain tool. `args_schema` is the contract's JSON schema: the
    console validates the arguments (a `schema_invalid` refusal tells the model where it went
    wrong). Invoke it with a `ToolCall`; plain arguments without a tool-call id are a
    `ValueError`, since without one a repeated call could be a second proposal."""

    client: Client | AsyncClient
    operation: str
    timeout: float = 60.0

    def _to_args_and_kwargs(self, tool_input: str | dict[str, Any],
                            tool_call_id: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The arguments are the model's; the tool-call id is passed apart from them, so that no
        # argument name of a contract can collide with it.
        if tool_call_id is None:
            raise ValueError(f"{self.name}: invoke it with a ToolCall ({{'name', 'args', 'id', "
                             "'type': 'tool_call'}}): its id is the proposal's call_id")
        _, arguments = super()._to_args_and_kwargs(tool_input, tool_call_id)
        return (tool_call_id,), arguments

    def _run(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        return self.message(calling.call(self.sync_client(), self.operation, arguments,
                                         call_id, timeout=self.timeout), call_id)

    async def _arun(self, call_id: str, /, **arguments: Any) -> ToolMessage:
        return self.message(await calling.acall(self.client, self.operation, arguments,
                                                call_id, timeout=self.timeout), call_id)

    def sync_client(self) -> Client:
        """The tool's `Client`; a `TypeError` saying to use `ainvoke` for an `AsyncClient`."""
        if isinstance(self.client, AsyncClient):
            raise TypeError(f"{self.name} holds an AsyncClient: call it with ainvoke, or "
                            "make it with a Client")
        return self.client

    def message(self, answer: calling.Answer, call_id: str) -> ToolMessage:
        """The `ToolMessage` of an answer: the result, or the error text (`status="error"`)."""
        if answer.ok:
            return ToolMessage(answer.text, tool_call_id=call_id, name=self.name,
                               artifact=answer.operation)
        return ToolMessage(answer.text, tool_call_id=call_id, name=self.name, status="error",
                           artifact={"code": answer.code, "details": answer.details})


def tool(spec: Tool, client: Client | AsyncClient, *, timeout: float = 60.0) -> ConsoleTool:
    return ConsoleTool(name=calling.tool_name(spec), description=spec.description,
                       args_schema=spec.input_schema, client=client, operation=spec.name,
                       timeout=timeout)


def tools(client: Client, *, timeout: float = 60.0,
          operations: Iterable[str] | None = None) -> list[ConsoleTool]:
    """One LangChain tool per contract of `client.contracts()` (only those named in
    `operations` when given), named as the contract with `.` replaced by `_` (`crm_lookup`).
    `timeout` (seconds) bounds each call's wait for the decision and the outcome together."""
    return [tool(spec, client, timeout=timeout) for spec in specs(client, operations)]


async def atools(client: Client | AsyncClient, *, timeout: float = 60.0,
                 operations: Iterable[str] | None = None) -> list[ConsoleTool]:
    """`tools` for async code, of an `AsyncClient` (whose contracts are awaited) or a
    `Client`."""
    return [tool(spec, client, timeout=timeout) for spec in await aspecs(client, operations)]
