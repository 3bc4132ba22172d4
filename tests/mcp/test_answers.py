"""What the gateway answers about a proposal, read from the store (docs/mcp.md#answers): only the
agent's own MCP call is ever dispatched by a read, and a refusal is answered from the audit, not
by dispatching again."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from dispatch.gateway.answers import Status, proposal_standing
from dispatch.models import AuditEvent, Operation
from dispatch.services.principals import agent_create
from dispatch.services.proposals import Origin, proposal_intake
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = {"customer_id": "cus-001"}


@pytest.fixture
def eager(settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True


def lookup(world: World, *, channel: str = "", principal: Any = None) -> Any:
    return proposal_intake(principal=principal or world.owner, operation="crm.lookup",
                           arguments=LOOKUP, dispatch_on_approval=True, now=timezone.now(),
                           origin=Origin(channel=channel)).proposal


def test_reading_another_agents_proposal_never_dispatches_it(live: World, eager: None) -> None:
    colleague, _ = agent_create(name="colleague", tenant="acme", tools=["crm.lookup"])
    rest_proposal = lookup(live)
    mcp_proposal = lookup(live, channel="mcp")
    for proposal in (rest_proposal, mcp_proposal):
        standing = proposal_standing(colleague, proposal.id, now=timezone.now())
        assert standing.status is Status.WORKING and standing.operation is None
    # The owner reading its REST proposal through MCP does not dispatch it either: only a
    # proposal its MCP call made asked for that.
    assert proposal_standing(live.owner, rest_proposal.id, now=timezone.now()).operation is None
    assert not Operation.objects.exists()
    dispatched = proposal_standing(live.owner, mcp_proposal.id, now=timezone.now())
    assert dispatched.operation is not None  # claimed by this read; the handler ran on commit
    settled = proposal_standing(live.owner, mcp_proposal.id, now=timezone.now())
    assert settled.status is Status.COMPLETED
    assert settled.operation is not None and settled.operation.state == "completed"
    assert Operation.objects.count() == 1


def test_a_refused_dispatch_is_answered_again_from_the_audit(
        live: World, eager: None, settings: Any) -> None:
    proposal = lookup(live, channel="mcp")
    live.owner.tools = ["email.send"]  # the tool is taken away before the dispatch
    live.owner.save(update_fields=["tools"])
    answers = [proposal_standing(live.owner, proposal.id, now=timezone.now()) for _ in range(3)]
    assert {a.status for a in answers} == {Status.FAILED}
    assert {a.denial.code.value for a in answers if a.denial} == {"tool_not_permitted"}
    assert AuditEvent.objects.filter(proposal_id=proposal.id, kind="dispatch.denied").count() == 1
    assert not Operation.objects.exists()
