"""`unknown_operation` and `tool_not_permitted`."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import (
    Principal,
)
from dispatch.services.authority import grant_issue
from dispatch.services.principals import agent_create
from dispatch.services.proposals import proposal_create
from protocols.denials import DenialCode
from tests.conftest import MAILBOX, World
from tests.db.denials.support import (
    dispatch,
    email_arguments,
    propose_lookup,
    state_of,
    store,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("operation", ["email.sendx", "", "EMAIL.SEND", "email", None, 7,
                                       ["email.send"], "payments.transfer "])
def test_unknown_operation_is_refused(world: World, operation: Any) -> None:
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation=operation,
                     arguments={"customer_id": "cus-001"}, now=world.now)
    assert denial.code is DenialCode.UNKNOWN_OPERATION
    assert denial.status == 404
    assert store() == before


def test_tool_outside_the_agents_tool_set_is_refused(world: World) -> None:
    narrow, _ = agent_create(name="narrow", tenant="acme", tools=["crm.lookup"])
    grant_issue(issuer="admin", subject=narrow, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=world.now)
    # A draft of an agent whose tools take drafts: `narrow` could not make one itself.
    draft = world.draft()
    before = store()
    denial = refused(proposal_create, principal=narrow, operation="email.send",
                     arguments=email_arguments(draft), now=world.now)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert denial.details == {"operation": "email.send"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_human_without_tools_cannot_propose(world: World) -> None:
    denial = refused(proposal_create, principal=world.approver, operation="crm.lookup",
                     arguments={"customer_id": "cus-001"}, now=world.now)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED


def test_tool_removed_after_the_proposal_is_refused_at_dispatch(world: World) -> None:
    proposal = propose_lookup(world)
    Principal.objects.filter(id=world.owner.id).update(tools=["email.send"])
    world.owner.refresh_from_db()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert store() == before
