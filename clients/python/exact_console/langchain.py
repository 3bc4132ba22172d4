"""The console's contracts as LangChain tools (`pip install ./clients/python[langchain]`).

    from exact_console import Client
    from exact_console.langchain import tools

    with Client("http://127.0.0.1:8000", token) as console:
        agent_tools = tools(console, timeout=600)     # email_send, crm_lookup, ...
        message = agent_tools[0].invoke(tool_call)    # a ToolCall from the model

A tool is the contract, nothing more: invoking it with a `ToolCall` proposes the exact
arguments with `call_id` = the call's `id` and `dispatch_on_approval`, waits for the human's
decision and the operation's outcome, and answers a `ToolMessage`. The effect runs in the
console's handler, behind its dispatcher, never in the agent's process. A refusal (the code and
message of the console's denial) and a wait past the timeout (`approval_pending`) come back to
the model as the message's error text (`status="error"`); the tool never raises them and never
tries again. Invoking it again with the same tool-call id (a resumed or replayed run) answers
from the first proposal: the console never makes a second one.

This module is the only one of the package that imports LangChain.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from exact_console import calling
from exact_console.client import Client
from exact_console.tools import Tool
from exact_console.tools import tools as specs

__all__ = ["ConsoleTool", "tools"]


class ConsoleTool(BaseTool):
    """One contract as a LangChain tool. `args_schema` is the contract's JSON schema: the
    console validates the arguments (a `schema_invalid` refusal tells the model where it went
    wrong). Invoke it with a `ToolCall`; plain arguments without a tool-call id are a
    `ValueError`, since without one a repeated call could be a second proposal."""

    client: Client
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
        return self.message(calling.call(self.client, self.operation, arguments, call_id,
                                          timeout=self.timeout), call_id)

    def message(self, answer: calling.Answer, call_id: str) -> ToolMessage:
        """The `ToolMessage` of an answer: the result, or the error text (`status="error"`)."""
        if answer.ok:
            return ToolMessage(answer.text, tool_call_id=call_id, name=self.name,
                               artifact=answer.operation)
        return ToolMessage(answer.text, tool_call_id=call_id, name=self.name, status="error",
                           artifact={"code": answer.code, "details": answer.details})


def tool(spec: Tool, client: Client, *, timeout: float = 60.0) -> ConsoleTool:
    return ConsoleTool(name=calling.tool_name(spec), description=spec.description,
                       args_schema=spec.input_schema, client=client, operation=spec.name,
                       timeout=timeout)


def tools(client: Client, *, timeout: float = 60.0,
          operations: Iterable[str] | None = None) -> list[ConsoleTool]:
    """One LangChain tool per contract of `client.contracts()` (only those named in
    `operations` when given), named as the contract with `.` replaced by `_` (`crm_lookup`).
    `timeout` (seconds) bounds each call's wait for the decision and the outcome together."""
    return [tool(spec, client, timeout=timeout) for spec in specs(client, operations)]
