"""The MCP gateway (docs/mcp.md): an MCP server, on the official SDK's low-level server, whose
tools are the calling agent's contracts; every call goes through the same services and
dispatcher as the REST API. A thin adapter: no second dispatcher, no second store.

The tool list is per caller, so the server is the SDK's low-level `Server` with its own
`tools/list` and `tools/call` handlers (the high-level `MCPServer` holds one static tool set).
Who calls is the agent of the bearer token: fixed for the stdio transport (`mcp_serve
--token`), read from each HTTP request's `Authorization` header otherwise (the ASGI app of
`dispatch.gateway.http` has already refused a missing or wrong one with 401).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from django.utils import timezone
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from dispatch.gateway import tasks
from dispatch.gateway.answers import Standing, Status, outcome_body, proposal_standing
from dispatch.gateway.calls import call_id_of, gateway_call, origin_of
from dispatch.gateway.results import denial_result, pending_result, standing_result, tool_result
from dispatch.gateway.store import bearer_principal, in_thread
from dispatch.gateway.tools import ToolSpec, tools_for
from dispatch.models import Principal
from dispatch.observability.context import bind_ids
from protocols.denials import Denial

log = logging.getLogger(__name__)

#: How often a waiting call reads the store again, in seconds.
POLL_SECONDS = 0.25
INSTRUCTIONS = (
    "Your tools are the actions you may propose. An action that needs approval runs only after "
    "an operator approves its exact arguments in the console; nothing you send can approve it. "
    "A call that answers `approval_pending` has not run: ask `proposal_status` later.")


class GatewayServer(Server[Any]):
    """The SDK's low-level server, advertising the tasks it serves on 2025-11-25 (the SDK
    derives capabilities from the core methods only)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        capabilities.tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())))
        return capabilities


class Gateway:
    """One MCP server; `token` fixes the caller (stdio), else each HTTP request names it."""

    def __init__(self, *, token: str | None = None, wait_seconds: float | None = None) -> None:
        self.token = token
        self.wait_seconds = float(settings.MCP_WAIT_SECONDS if wait_seconds is None
                                  else wait_seconds)
        self.server = GatewayServer("exact-action-console", version="1",
                                    instructions=INSTRUCTIONS, on_list_tools=self.list_tools,
                                    on_call_tool=self.call_tool)
        tasks.install(self.server, self)

    async def principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        """The calling agent; an unknown or revoked token is a protocol error (the HTTP app
        answers 401 before this is reached; over stdio the token was checked at start)."""
        if self.token is not None:
            header = f"Bearer {self.token}"
        else:
            headers = getattr(ctx.request, "headers", None)
            header = headers.get("authorization", "") if headers is not None else ""
        principal = await in_thread(bearer_principal, header)
        if principal is None:
            raise MCPError(code=-32001, message="Unauthorized: unknown or revoked token")
        # On this request's log lines (its task's own context; docs/design.md#logs).
        bind_ids(tenant=principal.tenant_id, principal=principal.id)
        return principal

    # --- tools/list ---------------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        principal = await self.principal(ctx)
        specs = await in_thread(tools_for, list(principal.tools))
        return types.ListToolsResult(tools=[mcp_tool(spec) for spec in specs])

    # --- tools/call ---------------------------------------------------------------------------

    async def propose(self, ctx: ServerRequestContext[Any, Any],
                      params: types.CallToolRequestParams,
                      principal: Principal | None = None) -> Standing | types.CallToolResult:
        """Make the call's proposal (or answer a gateway tool): its standing, or a refusal.
        `principal`: the caller, when the handler has already authenticated it."""
        if principal is None:
            principal = await self.principal(ctx)
        try:
            return await in_thread(gateway_call, principal, params.name,
                                   params.arguments or {}, call_id=call_id_of(ctx, params),
                                   origin=origin_of(ctx), now=timezone.now())
        except Denial as denial:
            return denial_result(denial)

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> Any:
        principal = await self.principal(ctx)
        answer = await self.propose(ctx, params, principal)
        if isinstance(answer, types.CallToolResult):
            return answer
        if answer.status is not Status.WORKING:
            return standing_result(answer)
        if answer.operation is None:  # waiting on an operator: a task, if the client takes one
            task = tasks.created(answer, ctx)
            if task is not None:
                return task
        return await self.wait(ctx, principal, answer)

    async def wait(self, ctx: ServerRequestContext[Any, Any], principal: Principal,
                   standing: Standing) -> types.CallToolResult:
        """Wait up to `MCP_WAIT_SECONDS` for the action to settle, reporting progress when the
        client asked for it."""
        started = anyio.current_time()
        reported = ""
        while True:
            elapsed = anyio.current_time() - started
            if standing.message != reported:
                reported = standing.message
                await _progress(ctx, elapsed, self.wait_seconds, reported)
            if standing.status is not Status.WORKING:
                return standing_result(standing)
            if elapsed >= self.wait_seconds:
                if standing.operation is not None:  # approved and running: say so
                    return tool_result(outcome_body(standing))
                return pending_result(standing)
            await anyio.sleep(POLL_SECONDS)
            standing = await in_thread(proposal_standing, principal, standing.proposal.id,
                                       now=timezone.now())


def mcp_tool(spec: ToolSpec) -> types.Tool:
    """The SDK's tool of `spec`: named for models, titled with the qualified name, in the tool
    and in its annotations (docs/mcp.md#names)."""
    return types.Tool(
        name=spec.name, title=spec.title, description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            title=spec.title, read_only_hint=spec.read_only, destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent, open_world_hint=spec.destructive),
        execution=types.ToolExecution(task_support="optional") if spec.gated else None)


async def _progress(ctx: ServerRequestContext[Any, Any], elapsed: float, total: float,
                    message: str) -> None:
    """A progress notification (the SDK sends none when the client gave no progress token)."""
    try:
        await ctx.session.report_progress(min(elapsed, total), total, message)
    except Exception:  # progress is a courtesy: a client gone mid-wait must not fail the call
        log.debug("progress notification not sent", exc_info=True)
