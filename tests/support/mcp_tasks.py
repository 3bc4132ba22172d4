"""The client side of MCP tasks, for tests: the official SDK 2.3.0 client ships the task types
but no way to make a task-augmented call (docs/mcp.md#tasks).

- 2025-11-25: `legacy_task_call` sends `tools/call` with a `task` member past the client's
  result check (which would read the `CreateTaskResult` as a `CallToolResult`), through two
  private attributes of the SDK's `ClientSession`; `tasks/get`, `tasks/result`, `tasks/cancel`
  and `tasks/list` go through its public `send_request`.
- 2026-07-28: the tasks extension as a `ClientExtension` whose claim on `resultType: "task"`
  keeps the task handle (`session.call_tool(..., allow_claimed=True)`), and requests for
  `tasks/get` and `tasks/cancel`.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ResultClaim

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
ENDED = ("completed", "failed", "cancelled")


# --- 2025-11-25 ----------------------------------------------------------------------------------


async def legacy_task_call(client: Client, name: str, arguments: dict[str, Any],
                           meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task-augmented `tools/call`; the raw answer (a `CreateTaskResult`, or a tool result if
    the gateway made no task)."""
    session: Any = client.session
    params: dict[str, Any] = {"name": name, "arguments": arguments, "task": {"ttl": 600_000}}
    if meta:
        params["_meta"] = meta
    data: dict[str, Any] = {"method": "tools/call", "params": params}
    options: dict[str, Any] = {}
    session._stamp(data, options)
    answer: dict[str, Any] = await session._dispatcher.send_raw_request(
        "tools/call", data["params"], options)
    return answer


async def legacy_get(client: Client, task_id: str) -> types.GetTaskResult:
    return await client.session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
        types.GetTaskResult)


async def legacy_result(client: Client, task_id: str) -> types.CallToolResult:
    return await client.session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
        types.CallToolResult)


async def legacy_cancel(client: Client, task_id: str) -> types.CancelTaskResult:
    return await client.session.send_request(
        types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
        types.CancelTaskResult)


async def legacy_list(client: Client) -> types.ListTasksResult:
    return await client.session.send_request(types.ListTasksRequest(), types.ListTasksResult)


# --- 2026-07-28 ----------------------------------------------------------------------------------


class TaskFields(types.Result):
    """The extension's task, flat."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreatedTask(TaskFields):
    """The task answer to a call."""

    result_type: Literal["task"] = "task"


class DetailedTask(TaskFields):
    """`tasks/get`: the task with its result or error inline."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TasksGet(types.Request[types.GetTaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: types.GetTaskRequestParams
    name_param = "taskId"


class TasksCancel(types.Request[types.CancelTaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: types.CancelTaskRequestParams
    name_param = "taskId"


async def _keep(claimed: CreatedTask, ctx: ClaimContext) -> CreatedTask:
    return claimed


class TasksExtension(ClientExtension):
    """Opts the client into the tasks extension; a claimed task is handed back as is."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        # The SDK types `resolve` as answering a CallToolResult; a claim may hand back its own
        # model, which is what the tasks extension does with a task.
        return [ResultClaim(result_type="task", model=CreatedTask,
                            resolve=_keep)]  # type: ignore[arg-type]


async def modern_task_call(client: Client, name: str, arguments: dict[str, Any],
                           meta: dict[str, Any] | None = None) -> Any:
    """A `tools/call` that may answer a task: a `CreatedTask`, or a `CallToolResult`."""
    # `meta` is the request's `_meta` as a plain mapping, which the SDK takes at run time.
    return await client.session.call_tool(name, arguments, meta=meta,  # type: ignore[arg-type]
                                          allow_claimed=True)


async def modern_get(client: Client, task_id: str) -> DetailedTask:
    return await client.session.send_request(
        TasksGet(params=types.GetTaskRequestParams(task_id=task_id)), DetailedTask)


async def modern_cancel(client: Client, task_id: str) -> None:
    await client.session.send_request(
        TasksCancel(params=types.CancelTaskRequestParams(task_id=task_id)), types.EmptyResult)


async def poll_until_ended(get: Any, client: Client, task_id: str, seconds: float = 60) -> Any:
    """`get(client, task_id)` until the task ends (or fail after `seconds`)."""
    with anyio.fail_after(seconds):
        while True:
            task = await get(client, task_id)
            if task.status in ENDED:
                return task
            await anyio.sleep(0.3)
