"""The console's contracts as a Pydantic AI toolset (`pip install ./clients/python[pydantic-ai]`).

    from pydantic_ai import Agent
    from exact_console import Client
    from exact_console.pydantic_ai import toolset

    with Client("http://127.0.0.1:8000", token) as console:
        agent = Agent(model, toolsets=[toolset(console, timeout=600)])   # email_send, ...
        result = agent.run_sync("Send the refund email.")

A tool is the contract, nothing more: the model calling it proposes the exact arguments with
`call_id` = the call's `tool_call_id` and `dispatch_on_approval`, waits for the human's decision
and the operation's outcome, and returns the operation's result. The effect runs in the
console's handler, behind its dispatcher, never in the agent's process. A refusal (the code and
message of the console's denial) and a wait past the timeout (`approval_pending`) come back to
the model as the tool's failed return, `"<code>: <message>"` (Pydantic AI's `ToolFailed`: the
model sees it; nothing retries it, and it uses none of the tool's retries). Calling it again
with the same tool-call id (a resumed or replayed run) answers from the first proposal: the
console never makes a second one.

With `deferred=True` a call whose approval is pending does not wait: it takes Pydantic AI's own
approval path. The tool raises `ApprovalRequired` (the proposal's id and approval page in its
metadata), and the run ends with `DeferredToolRequests` listing the call in `approvals`.
`results_from_console(client, requests)` reads the console's decisions into the
`DeferredToolResults` that resume the run: `ToolApproved()` for a granted approval, `ToolDenied`
with the refusal's code and message (`approval_denied: ...`) for a denied, expired or revoked
one, nothing for one still pending. Resumed, an approved call proposes again under its own
tool-call id, finds the console's decision and waits for the outcome as an undeferred call
does. A `ToolApproved` is only Pydantic AI's permission to run the tool function: the function
asks the console, so an approval the program writes itself approves nothing (the call waits for
the console's decision, and answers `approval_pending` past the timeout), and `override_args`
are refused by the console (`proposal_mismatch`): the approved arguments are the exact ones.

The toolset takes a `Client` or an `AsyncClient` (`await atoolset(console)`); its tools are
coroutines, and a `Client`'s calls run on a thread of their own, never on a shared pool. A
console that could not be reached is the failed return `console_unreachable: ...`.

This module is the only one of the package that imports Pydantic AI.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from exact_console import calling
from exact_console._calls import decided
from exact_console._extras import needs
from exact_console.client import AsyncClient, Client
from exact_console.tools import Tool
from exact_console.tools import atools as aspecs
from exact_console.tools import tools as specs

with needs(__name__, "pydantic-ai", "pydantic_ai"):
    from pydantic_ai import (
        ApprovalRequired,
        DeferredToolRequests,
        DeferredToolResults,
        RunContext,
        ToolApproved,
        ToolDenied,
        ToolFailed,
        ToolReturn,
    )
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset

__all__ = ["aresults_from_console", "atoolset", "results_from_console", "tool", "toolset"]

#: The key of a deferred call's metadata that marks it as the console's.
METADATA_KEY = "exact_console"


def result(answer: calling.Answer) -> ToolReturn | ToolFailed:
    """What the model sees: the operation's result (the operation itself rides along as
    metadata, which the model does not see), or a `ToolFailed` with the answer's error text."""
    if not answer.ok:
        return ToolFailed(answer.text)
    operation = answer.operation or {}
    return ToolReturn(operation.get("result"), metadata=operation)


def told(answer: calling.Answer) -> ToolReturn:
    """A tool's return of `answer`; its `ToolFailed` raised."""
    returned = result(answer)
    if isinstance(returned, ToolFailed):
        raise returned
    return returned


def tool(spec: Tool, client: Client | AsyncClient, *, timeout: float = 60.0,
         deferred: bool = False) -> PydanticTool[Any]:
    """One contract as a Pydantic AI tool, named as the contract with `.` replaced by `_`, its
    parameters the contract's JSON schema (the console validates the arguments: a
    `schema_invalid` refusal tells the model where it went wrong)."""

    async def call(ctx: RunContext[Any], **arguments: Any) -> ToolReturn:
        call_id = ctx.tool_call_id
        if call_id is None:
            raise ValueError(f"{spec.name}: called without a tool-call id, which is the "
                             "proposal's call_id")
        if not deferred or ctx.tool_call_approved:
            # Approved by the program is not approved by the console: the call asks it.
            return told(await calling.acall(client, spec.name, arguments, call_id,
                                            timeout=timeout))
        begun = await calling.abegin(client, spec.name, arguments, call_id)
        if isinstance(begun, calling.Answer):
            return told(begun)
        if not decided(begun):
            raise ApprovalRequired({METADATA_KEY: {
                "operation": spec.name, "proposal_id": begun["id"],
                "approval_url": calling.approval_url(client, begun)}})
        return told(await calling.aanswer(client, begun, timeout=timeout))

    return PydanticTool.from_schema(call, name=calling.tool_name(spec),
                                    description=spec.description,
                                    json_schema=spec.input_schema, takes_ctx=True)


def toolset(client: Client, *, timeout: float = 60.0, operations: Iterable[str] | None = None,
            deferred: bool = False) -> FunctionToolset[Any]:
    """A toolset of one tool per contract of `client.contracts()` (only those named in
    `operations` when given). `timeout` (seconds) bounds each call's wait for the decision and
    the outcome together; with `deferred`, a call whose approval is pending is deferred instead
    (see the module)."""
    return FunctionToolset([tool(spec, client, timeout=timeout, deferred=deferred)
                            for spec in specs(client, operations)])


async def atoolset(client: Client | AsyncClient, *, timeout: float = 60.0,
                   operations: Iterable[str] | None = None,
                   deferred: bool = False) -> FunctionToolset[Any]:
    """`toolset` of an `AsyncClient` (whose contracts are awaited) or a `Client`."""
    return FunctionToolset([tool(spec, client, timeout=timeout, deferred=deferred)
                            for spec in await aspecs(client, operations)])


def results_from_console(client: Client, requests: DeferredToolRequests, *,
                         timeout: float = 60.0) -> DeferredToolResults:
    """The approvals of the deferred calls of this toolset whose approval a human has decided
    in the console (see the module): each call is proposed again with its own tool-call id and
    arguments (the console answers the first proposal, or refuses other arguments as
    `proposal_mismatch`, told as a `ToolDenied`). A call still pending, or whose console could
    not be reached, is left out (`requests.remaining(results)` lists it); calls of other tools
    are left out too. Nothing here approves anything: only the console's decision counts.
    `timeout` bounds the reading of a refused one's answer."""
    return calling.drive(client, _results(requests, timeout=timeout))


async def aresults_from_console(client: Client | AsyncClient, requests: DeferredToolRequests,
                                *, timeout: float = 60.0) -> DeferredToolResults:
    """`results_from_console` for async code."""
    return await calling.adrive(client, _results(requests, timeout=timeout))


def _results(requests: DeferredToolRequests, *,
             timeout: float) -> calling.Steps[DeferredToolResults]:
    results = DeferredToolResults()
    for part in requests.approvals:
        ours = requests.metadata.get(part.tool_call_id, {}).get(METADATA_KEY)
        if not isinstance(ours, dict):
            continue
        begun = yield from calling.begin_steps(str(ours["operation"]), part.args_as_dict(),
                                               part.tool_call_id)
        if isinstance(begun, calling.Answer):
            answer = begun
        elif not decided(begun):
            continue
        elif _granted(begun):
            results.approvals[part.tool_call_id] = ToolApproved()
            continue
        else:  # denied, expired or revoked: dispatching it says which, with the code
            answer = yield from calling.answer_steps(begun, timeout=timeout)
        if answer.code == calling.UNREACHABLE:
            continue
        results.approvals[part.tool_call_id] = (
            ToolApproved() if answer.ok else ToolDenied(answer.text))
    return results


def _granted(proposal: dict[str, Any]) -> bool:
    approval = proposal.get("approval")
    return approval is None or (isinstance(approval, dict) and approval.get("state") == "granted")
