"""The MCP gateway's answers as tool results (docs/mcp.md#answers): structured content, and the same
JSON as text for clients that read only text."""

from __future__ import annotations

import json

import mcp_types as types
from django.core.serializers.json import DjangoJSONEncoder

from dispatch.gateway.answers import Standing, outcome_body
from dispatch.services.notifications import approval_url, console_url
from protocols.denials import Denial
from protocols.jsontypes import JSONObject


def tool_result(body: JSONObject, *, error: bool = False) -> types.CallToolResult:
    """A tool answer: `body` as structured content, and as JSON text for clients that read
    only text."""
    text = json.dumps(body, cls=DjangoJSONEncoder)  # datetimes as ISO 8601, as the REST API
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=json.loads(text), is_error=error)


def denial_result(denial: Denial) -> types.CallToolResult:
    """A refusal as the model sees it: `isError` with the error envelope (docs/mcp.md#answers),
    never a JSON-RPC error."""
    return tool_result(denial.as_body(), error=True)


def standing_result(standing: Standing) -> types.CallToolResult:
    """The answer of a call that is over (or of `proposal.status`)."""
    if standing.denial is not None:
        return denial_result(standing.denial)
    return tool_result(outcome_body(standing))


def pending_result(standing: Standing) -> types.CallToolResult:
    """`approval_pending`: the call has not run; the agent asks `proposal.status` later."""
    proposal = standing.proposal
    url = approval_url(standing.approval_id) if standing.approval_id else console_url()
    return tool_result({"status": "approval_pending", "proposal_id": proposal.id,
                        "digest": proposal.digest, "approval_url": url})
