"""MCP tasks for calls that wait on an operator (docs/mcp.md#tasks), on both protocol revisions the
official SDK speaks; it ships the task types but serves none of their methods.

A task is a proposal: its id is the proposal's id and its status is read from the store
(`answers.standing_of`), so a task is answered after a gateway restart, by any gateway process,
and nothing is kept in memory. `working` while the approval is pending and the action runs,
`completed` when the operation settled (its state says how, `unknown` included), `failed` with
the denial when it was denied, expired or refused, `cancelled` when it was withdrawn before it
ran.

- 2025-11-25 (SEP-1686, tasks in the core): a `tools/call` with a `task` member answers a
  `CreateTaskResult`; `tasks/get`, `tasks/result` (blocks until the task ends), `tasks/cancel`
  and `tasks/list`. The SDK checks a 2025 `tools/call` handler's answer against
  `CallToolResult`, so the task is answered by a middleware, before that check.
- 2026-07-28 (the tasks extension, `io.modelcontextprotocol/tasks`): a client that lists the
  extension in its request's capabilities gets a task answer (`resultType: "task"`) for a call
  that waits on an operator; `tasks/get` carries the result inline, `tasks/cancel` answers
  empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import anyio
import mcp_types as types
from django.utils import timezone
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from dispatch.gateway.answers import MCP, Standing, Status, standing_of
from dispatch.gateway.results import denial_result, standing_result
from dispatch.gateway.store import in_thread
from dispatch.models import Principal, Proposal
from dispatch.services.cancellation import proposal_cancel
from protocols.denials import Denial
from protocols.jsontypes import JSONObject

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
#: How often a client is asked to poll, in milliseconds; and how often `tasks/result` reads.
POLL_MS = 1000
#: The tasks `tasks/list` answers, newest first.
LIST_MAX = 50

_ENDED = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def task_of(standing: Standing, *, now: datetime) -> types.Task:
    """The 2025-11-25 task of a proposal's standing."""
    return types.Task(task_id=standing.proposal.id, status=standing.status.value,
                      status_message=standing.message,
                      created_at=_iso(standing.proposal.created_at), last_updated_at=_iso(now),
                      ttl=None, poll_interval=POLL_MS)


def legacy_task(standing: Standing, *, now: datetime) -> JSONObject:
    """`task_of` on the wire: `ttl` is required and null (the store keeps the task for as long
    as it keeps the proposal), which the SDK's serializer would leave out."""
    wire: JSONObject = task_of(standing, now=now).model_dump(by_alias=True, mode="json",
                                                            exclude_none=True)
    return {**wire, "ttl": None}


def modern_task(standing: Standing, *, now: datetime, detailed: bool) -> JSONObject:
    """The 2026-07-28 extension's task: flat, with the result (or the failure) inline."""
    task: JSONObject = {
        "taskId": standing.proposal.id, "status": standing.status.value,
        "statusMessage": standing.message, "createdAt": _iso(standing.proposal.created_at),
        "lastUpdatedAt": _iso(now), "ttlMs": None, "pollIntervalMs": POLL_MS,
    }
    if detailed and standing.status is Status.COMPLETED:
        task["result"] = payload(standing)
    if detailed and standing.status in (Status.FAILED, Status.CANCELLED):
        # The denial as the tool result the model reads, and as the error a task carries.
        task["result"] = payload(standing)
        assert standing.denial is not None
        task["error"] = {"code": -32000, "message": str(standing.denial),
                         "data": standing.denial.as_body()}
    return task


def payload(standing: Standing) -> JSONObject:
    """The `tools/call` answer a task ends with (a denial's is `isError`)."""
    if standing.denial is not None:
        result = denial_result(standing.denial)
    else:
        result = standing_result(standing)
    dumped: JSONObject = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def created(standing: Standing, ctx: ServerRequestContext[Any, Any]) -> JSONObject | None:
    """The 2026-07-28 task answer to a call, if the client takes tasks; else None."""
    capabilities = getattr(ctx.session, "client_capabilities", None)
    extensions = getattr(capabilities, "extensions", None) or {}
    if TASKS_EXTENSION not in extensions:
        return None
    return {"resultType": "task", **modern_task(standing, now=timezone.now(), detailed=False)}


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _own_standing(principal: Principal, task_id: str) -> Standing:
    """The standing of a task (a proposal) the principal made; anything else is unknown."""
    proposal = Proposal.objects.filter(id=task_id, principal_id=principal.id,
                                       channel=MCP).first()
    if proposal is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown task {task_id!r}")
    return standing_of(proposal, now=timezone.now(), dispatch=True)


def _cancel(principal: Principal, task_id: str) -> Standing:
    standing = _own_standing(principal, task_id)
    if standing.status in _ENDED:
        raise MCPError(code=types.INVALID_PARAMS,
                       message=f"task {task_id} already {standing.status.value}")
    try:
        proposal_cancel(actor=principal, proposal_id=task_id, now=timezone.now(),
                        reason="cancelled by the MCP client (tasks/cancel)")
    except Denial as denial:
        raise MCPError(code=types.INVALID_PARAMS, message=str(denial)) from None
    return _own_standing(principal, task_id)


def _recent(principal: Principal) -> list[Standing]:
    now = timezone.now()
    proposals = Proposal.objects.filter(principal_id=principal.id, channel=MCP).order_by(
        "-created_at")[:LIST_MAX]
    return [standing_of(proposal, now=now, dispatch=True) for proposal in proposals]


class Gateway(Protocol):
    """What the task methods need of the gateway (`dispatch.gateway.server.Gateway`)."""

    async def principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal: ...

    async def propose(self, ctx: ServerRequestContext[Any, Any],
                      params: types.CallToolRequestParams,
                      principal: Principal | None = None) -> Standing | types.CallToolResult: ...


def install(server: Any, gateway: Gateway) -> None:
    """Serve the task methods on `server`, and the 2025 task answer as a middleware."""

    async def standing(ctx: ServerRequestContext[Any, Any], task_id: str) -> Standing:
        principal = await gateway.principal(ctx)
        return await in_thread(_own_standing, principal, task_id)

    async def tasks_get(ctx: ServerRequestContext[Any, Any],
                        params: types.GetTaskRequestParams) -> Any:
        found = await standing(ctx, params.task_id)
        now = timezone.now()
        if _modern(ctx):
            return modern_task(found, now=now, detailed=True)
        return legacy_task(found, now=now)

    async def tasks_result(ctx: ServerRequestContext[Any, Any],
                           params: types.GetTaskPayloadRequestParams) -> Any:
        found = await standing(ctx, params.task_id)
        while found.status not in _ENDED:
            await anyio.sleep(POLL_MS / 1000)
            found = await standing(ctx, params.task_id)
        answer = payload(found)
        answer["_meta"] = {**answer.get("_meta", {}), RELATED_TASK: {"taskId": params.task_id}}
        return answer

    async def tasks_cancel(ctx: ServerRequestContext[Any, Any],
                           params: types.CancelTaskRequestParams) -> Any:
        principal = await gateway.principal(ctx)
        found = await in_thread(_cancel, principal, params.task_id)
        if _modern(ctx):
            return {}
        return legacy_task(found, now=timezone.now())

    async def tasks_list(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> Any:
        principal = await gateway.principal(ctx)
        now = timezone.now()
        return {"tasks": [legacy_task(found, now=now)
                          for found in await in_thread(_recent, principal)]}

    async def legacy_task_call(ctx: ServerRequestContext[Any, Any],
                               call_next: CallNext) -> HandlerResult:
        """A 2025-11-25 task-augmented `tools/call` of a contract answers its task."""
        params = ctx.params
        if (ctx.method != "tools/call" or _modern(ctx) or not isinstance(params, Mapping)
                or params.get("task") is None):
            return await call_next(ctx)
        call = types.CallToolRequestParams.model_validate(params, by_name=False)
        answer = await gateway.propose(ctx, call)
        if isinstance(answer, types.CallToolResult):  # refused, or a gateway tool: no task
            return answer
        return {"task": legacy_task(answer, now=timezone.now())}

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, tasks_get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, tasks_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, tasks_cancel)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, tasks_list)
    server.middleware.append(legacy_task_call)
    server.extensions[TASKS_EXTENSION] = {}
