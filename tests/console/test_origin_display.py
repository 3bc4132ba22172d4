"""Where a proposal came in: the approval page and the queue say "through MCP" with the
client's own name for it (docs/mcp.md#operators), escaped, and nothing for a REST proposal."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.services.proposals import Origin, proposal_intake
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

QUEUE = "/console/"


def propose_transfer(world: World, origin: Origin) -> Any:
    return proposal_intake(principal=world.owner, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
        "currency": "EUR", "memo": ""}, now=world.now, origin=origin).proposal


def page_of(proposal: Any) -> str:
    return f"/console/approvals/{proposal.approval.id}/"


def test_mcp_proposal_names_its_channel_and_client(world: World, operator: Browser) -> None:
    proposal = propose_transfer(world, Origin(channel="mcp", client="Claude Desktop 1.2.3"))
    body = text(operator.get(page_of(proposal)))
    assert "Proposed through MCP by owner" in body
    assert "client: <span class=\"mono\">Claude Desktop 1.2.3</span>" in body
    assert "(as the client names itself)" in body


def test_mcp_proposal_without_a_client_name_shows_the_channel_only(
    world: World, operator: Browser,
) -> None:
    proposal = propose_transfer(world, Origin(channel="mcp"))
    body = text(operator.get(page_of(proposal)))
    assert "Proposed through MCP by owner" in body
    assert "client:" not in body
    assert "as the client names itself" not in body


def test_rest_proposal_shows_no_channel(world: World, operator: Browser) -> None:
    proposal = propose_transfer(world, Origin())
    page = text(operator.get(page_of(proposal)))
    queue = text(operator.get(QUEUE))
    assert "MCP" not in page
    assert "MCP" not in queue
    assert 'id="origin"' not in page


def test_hostile_client_name_is_escaped(world: World, operator: Browser) -> None:
    hostile = '<script>alert("x")</script>" onmouseover="alert(1)'
    proposal = propose_transfer(world, Origin(channel="mcp", client=hostile))
    page = text(operator.get(page_of(proposal)))
    queue = text(operator.get(QUEUE))
    for body in (page, queue):
        assert "<script>alert" not in body
        assert '" onmouseover="' not in body
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    assert "Proposed through MCP by owner" in page


def test_queue_row_marks_an_mcp_proposal(world: World, operator: Browser) -> None:
    propose_transfer(world, Origin(channel="mcp", client="Claude Desktop 1.2.3"))
    body = text(operator.get(QUEUE))
    assert "via MCP" in body
    assert 'title="client: Claude Desktop 1.2.3 (as the client names itself)"' in body
