"""One MCP `tools/call`, synchronously against the store (docs/mcp.md#calls).

A contract's call is a proposal with `dispatch_on_approval`, made by `proposal_intake` exactly as
`POST /api/v1/proposals/` makes it, under the call id the client's `_meta.idempotency_key` names:
a call retried after a lost response finds the proposal the first one made, never a second
action. An action that needs no approval is then dispatched (`answers.standing_of`). The
gateway's own tools call the services of the matching REST calls.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator

from dispatch.api.presenters import proposal_view, resource_view
from dispatch.gateway.answers import (
    MCP,
    Standing,
    operation_brief,
    proposal_standing,
    standing_of,
)
from dispatch.gateway.results import standing_result, tool_result
from dispatch.gateway.tools import GATEWAY_TOOLS, PROPOSAL_STATUS, RESOURCE_CREATE
from dispatch.models import Principal
from dispatch.runtime import get_runtime
from dispatch.services.proposals import CALL_ID, CALL_ID_RULE, Origin, proposal_intake
from dispatch.services.resources import resource_create, revision_create
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject

#: The `_meta` key whose value is the call's idempotency key (the REST `call_id`).
IDEMPOTENCY_KEY = "idempotency_key"
#: One per gateway process: derived call ids of one stdio connection never meet another's.
_PROCESS_NONCE = secrets.token_hex(8)

_VALIDATORS = {name: Draft202012Validator(schema) for name, (_, schema) in GATEWAY_TOOLS.items()}


def call_id_of(ctx: Any, params: types.CallToolRequestParams) -> str | None:
    """The call id of this call: the client's `_meta.idempotency_key`, else one derived from the
    session and the request id (stable across a retry only within one session), else none (a
    stateless HTTP request without a key is not idempotent)."""
    meta = params.meta or {}
    key = meta.get(IDEMPOTENCY_KEY)
    if key is not None:
        if not isinstance(key, str) or not CALL_ID.fullmatch(key):
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": f"/_meta/{IDEMPOTENCY_KEY}", "message": CALL_ID_RULE}])
        return key
    session = _session_id(ctx)
    if session is None or ctx.request_id is None:
        return None
    digest = hashlib.sha256(f"{session}\n{ctx.request_id}".encode()).hexdigest()[:40]
    return f"mcp-{digest}"


def _session_id(ctx: Any) -> str | None:
    request = getattr(ctx, "request", None)
    if request is None:  # stdio: one connection per process
        return _PROCESS_NONCE
    session = request.headers.get("mcp-session-id")
    return f"http:{session}" if session else None


def origin_of(ctx: Any) -> Origin:
    """`channel` "mcp" and the client's own name and version, when it sent them."""
    try:
        info = ctx.session.client_params.client_info
        client = f"{info.name} {info.version}".strip()
    except AttributeError:
        client = ""
    return Origin(channel=MCP, client=client)


def gateway_call(
    principal: Principal, name: str, arguments: JSONObject, *, call_id: str | None,
    origin: Origin, now: datetime,
) -> Standing | types.CallToolResult:
    """A contract's call as its standing (the caller waits or makes a task of it), or the
    answer of one of the gateway's own tools. `name` is a tool name (`email_send`) or, as
    before tool names were listed, the qualified name (`email.send`): both are taken."""
    name = get_runtime().operation_of_tool(name)
    if name in GATEWAY_TOOLS:
        return _gateway_tool(principal, name, arguments, now=now)
    intake = proposal_intake(principal=principal, operation=name, arguments=arguments,
                             dispatch_on_approval=True, call_id=call_id, now=now,
                             origin=origin)
    return standing_of(intake.proposal, now=now, dispatch=True)


def _gateway_tool(principal: Principal, name: str, arguments: JSONObject, *,
                  now: datetime) -> types.CallToolResult:
    errors = [{"pointer": "/" + "/".join(str(p) for p in error.absolute_path),
               "message": error.message}
              for error in _VALIDATORS[name].iter_errors(arguments)]
    if errors:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=errors)
    if name == PROPOSAL_STATUS:
        standing = proposal_standing(principal, arguments["proposal_id"], now=now)
        if standing.denial is not None:
            return standing_result(standing)
        view = proposal_view(standing.proposal, now=now)
        if standing.operation is not None:
            view["operation"] = operation_brief(standing.operation)
        return tool_result(view)
    if name == RESOURCE_CREATE:
        resource, revision = resource_create(principal=principal, kind=arguments["kind"],
                                             payload=arguments["payload"], now=now)
    else:
        resource, revision = revision_create(
            principal=principal, resource_id=arguments["id"],
            base_revision=arguments["base_revision"], payload=arguments["payload"], now=now)
    return tool_result(resource_view(resource, revision))
