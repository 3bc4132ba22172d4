"""The denial tests' fixtures: a colleague of the owner, the other tenant's objects, and a
policy that refuses financial writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import (
    Principal,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_issue
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import agent_create
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create
from tests.conftest import ALL_TOOLS, MAILBOX, World
from tests.db.denials.support import (
    PAYLOAD,
    email_arguments,
    grant_of,
)


@pytest.fixture
def colleague(world: World) -> Principal:
    """A second agent of the owner's tenant, with the same tools and grants."""
    agent, _ = agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=agent, operations=["email.send", "crm.lookup"],
                scope={"mailbox": [MAILBOX], "customer": "*"}, now=world.now)
    return agent


@pytest.fixture
def elsewhere(world: World) -> dict[str, Any]:
    """Objects of the other tenant: a resource, a pending and a dispatched proposal, a grant."""
    payload = {**PAYLOAD, "from": "ops@globex.example"}
    pending_draft, _ = resource_create(principal=world.outsider, kind="email_draft",
                                       payload=payload, now=world.now)
    pending = proposal_create(principal=world.outsider, operation="email.send",
                              arguments=email_arguments(pending_draft), now=world.now)
    sent_draft, _ = resource_create(principal=world.outsider, kind="email_draft",
                                    payload=payload, now=world.now)
    approved = proposal_create(principal=world.outsider, operation="email.send",
                               arguments=email_arguments(sent_draft), now=world.now)
    _, permit = approval_decide(approver=world.outsider_operator,
                                approval_id=approved.approval.id, decision="grant",
                                digest=approved.digest, now=world.now)
    operation = proposal_dispatch(principal=world.outsider, proposal_id=approved.id,
                                  now=world.now, enqueue=False)
    return {
        "resource": pending_draft, "proposal": pending, "approval": pending.approval,
        "operation": operation, "permit": permit, "grant": grant_of(world.outsider, "email.send"),
        "claimed_proposal": approved,
    }


@pytest.fixture
def email_only_policy(policy: Callable[[list[str]], None]) -> Callable[[], None]:
    """Call to make deployment policy refuse `financial_write`; the runtime is rebuilt."""
    return lambda: policy(["read", "external_write", "human"])
