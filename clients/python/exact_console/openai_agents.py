"""The console's contracts as OpenAI Agents SDK tools
(`pip install "./clients/python[openai-agents]"`).

    from agents import Agent, Runner
    from exact_console import Client
    from exact_console.openai_agents import tools

    with Client("http://127.0.0.1:8000", token) as console:
        agent = Agent(name="support", tools=tools(console, timeout=600))   # email_send, ...
        result = Runner.run_sync(agent, "Send the refund email.")

A tool is the contract, nothing more: the model calling it proposes the exact arguments with
`call_id` = the SDK's tool-call id (`ToolContext.tool_call_id`) and `dispatch_on_approval`,
waits for the human's decision and the operation's outcome, and returns the operation's result
as JSON. The effect runs in the console's handler, behind its dispatcher, never in the agent's
process. A refusal (the code and message of the console's denial) and a wait past the timeout
(`approval_pending`) come back to the model as the tool's output, `"<code>: <message>"`: the
tool never raises them and never tries again. Calling it again with the same tool-call id (a
resumed or replayed run) answers from the first proposal: the console never makes a second one.

The approver is the console. The tools are made with the SDK's `needs_approval=False`: a run
never stops on the SDK's own approval, and `RunState.approve()` has nothing to approve. With
`interrupt=True` a call whose contract needs an approval is proposed first and, while the
console's approval is pending, interrupts the run (`result.interruptions`, the SDK's pause);
`decisions_from_console(client, state)` then approves or rejects each interrupted call in the
`RunState` as the console decided it. An SDK-side `approve()` only lets the tool run, and the
tool still waits for the console's decision: nothing runs that the console has not granted.

The tools take a `Client` or an `AsyncClient` (`await atools(console)`); a `Client`'s calls run
on a thread of their own, never on asyncio's default executor. A console that could not be
reached is the output `console_unreachable: ...`.

This module is the only one of the package that imports the OpenAI Agents SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exact_console import calling
from exact_console._calls import decided
from exact_console._extras import needs
from exact_console.client import AsyncClient, Client
from exact_console.tools import Tool
from exact_console.tools import atools as aspecs
from exact_console.tools import tools as specs

with needs(__name__, "openai-agents", "agents"):
    from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
    from agents.tool_context import ToolContext

__all__ = ["ConsoleTool", "adecisions_from_console", "atools", "decisions_from_console",
           "tool", "tools"]


@dataclass
class ConsoleTool(FunctionTool):
    """One contract as an SDK `FunctionTool`; `operation` is the contract's qualified name."""

    operation: str = field(default="", kw_only=True)


def arguments_of(raw: str) -> dict[str, Any] | calling.Answer:
    """The model's arguments (a JSON object, as the SDK passes them: a string), or the
    `schema_invalid` answer of anything else; the console validates the rest."""
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError as error:
        return calling.Answer(f"schema_invalid: the arguments are not JSON ({error})",
                               "schema_invalid")
    if not isinstance(parsed, dict):
        return calling.Answer("schema_invalid: the arguments must be a JSON object",
                               "schema_invalid")
    return parsed


def tool(spec: Tool, client: Client | AsyncClient, *, timeout: float = 60.0,
         interrupt: bool = False) -> ConsoleTool:
    """One contract as an SDK tool, named as the contract with `.` replaced by `_`, its
    parameters the contract's JSON schema as the console publishes it (not made "strict": the
    console validates the arguments, and a `schema_invalid` answer tells the model where it went
    wrong)."""

    # The refusals of proposals made by `pending`, told when the SDK then calls the tool: a
    # refused proposal is not made again.
    refused: dict[str, calling.Answer] = {}

    async def invoke(context: ToolContext[Any], raw: str) -> str:
        arguments = arguments_of(raw)
        if isinstance(arguments, calling.Answer):
            return arguments.text
        if context.tool_call_id in refused:
            return refused.pop(context.tool_call_id).text
        # A sync client's long wait runs on a thread of its own, so that the SDK's other calls
        # (e.g. parallel tool calls) go on meanwhile.
        answer = await calling.acall(client, spec.name, arguments, context.tool_call_id,
                                     timeout=timeout)
        return answer.text

    async def pending(context: RunContextWrapper[Any], arguments: dict[str, Any],
                      call_id: str) -> bool:
        # Proposed now, so that the operator has it while the run is interrupted; the tool's
        # call later finds this proposal by its call id.
        begun = await calling.abegin(client, spec.name, arguments, call_id)
        if isinstance(begun, calling.Answer):
            refused[call_id] = begun
            return False
        return not decided(begun)

    return ConsoleTool(name=calling.tool_name(spec), description=spec.description,
                       params_json_schema=spec.input_schema, on_invoke_tool=invoke,
                       strict_json_schema=False,
                       needs_approval=pending if interrupt and spec.needs_approval else False,
                       operation=spec.name)


def tools(client: Client, *, timeout: float = 60.0, operations: Iterable[str] | None = None,
          interrupt: bool = False) -> list[ConsoleTool]:
    """One SDK `FunctionTool` per contract of `client.contracts()` (only those named in
    `operations` when given), named as the contract with `.` replaced by `_` (`crm_lookup`).
    `timeout` (seconds) bounds each call's wait for the decision and the outcome together; with
    `interrupt`, a call whose approval is pending interrupts the run instead (see the
    module)."""
    return [tool(spec, client, timeout=timeout, interrupt=interrupt)
            for spec in specs(client, operations)]


async def atools(client: Client | AsyncClient, *, timeout: float = 60.0,
                 operations: Iterable[str] | None = None,
                 interrupt: bool = False) -> list[ConsoleTool]:
    """`tools` of an `AsyncClient` (whose contracts are awaited) or a `Client`."""
    return [tool(spec, client, timeout=timeout, interrupt=interrupt)
            for spec in await aspecs(client, operations)]


def decisions_from_console(client: Client, state: RunState[Any, Any]) -> list[ToolApprovalItem]:
    """Carries the console's decisions into the interrupted run's `state`: each interrupted
    call of a console tool is proposed again with its own tool-call id and arguments (the
    console answers the first proposal, or refuses other arguments as `proposal_mismatch`); a
    granted one is approved, a refused one rejected with `"<code>: <message>"` as what the model
    is told. Answers the calls still pending at the console (left interrupted). Calls of other
    tools are left alone. Nothing here decides anything: only the console's decision counts, and
    an approved call's tool still waits for it."""
    return calling.drive(client, _decisions(state))


async def adecisions_from_console(client: Client | AsyncClient,
                                  state: RunState[Any, Any]) -> list[ToolApprovalItem]:
    """`decisions_from_console` for async code."""
    return await calling.adrive(client, _decisions(state))


def _decisions(state: RunState[Any, Any]) -> calling.Steps[list[ToolApprovalItem]]:
    waiting: list[ToolApprovalItem] = []
    for item in state.get_interruptions():
        operation = _operation_of(item)
        if operation is None:
            continue
        call_id = item.call_id
        arguments = arguments_of(str(item.arguments or "{}"))
        if not isinstance(call_id, str) or isinstance(arguments, calling.Answer):
            continue
        begun = yield from calling.begin_steps(operation, arguments, call_id)
        if isinstance(begun, calling.Answer):
            state.reject(item, rejection_message=begun.text)
        elif not decided(begun):
            waiting.append(item)
        elif (begun.get("approval") or {}).get("state") in (None, "granted"):
            state.approve(item)
        else:
            # Denied, expired or revoked: the console's refusal of its dispatch says which.
            refusal = yield from calling.answer_steps(begun, timeout=0)
            state.reject(item, rejection_message=refusal.text)
    return waiting


def _operation_of(item: ToolApprovalItem) -> str | None:
    for candidate in getattr(item.agent, "tools", []):
        if isinstance(candidate, ConsoleTool) and candidate.name == item.tool_name:
            return candidate.operation
    return None
