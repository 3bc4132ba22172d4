"""Revocation wins: a revoked or expired parent revokes its delegations, a revoked grant its
unclaimed permits, a deactivated human's token stops at once."""

from __future__ import annotations

import pytest

from dispatch.models import AuditEvent, Grant, Permit, Principal
from dispatch.services.authority import grant_delegate, grant_revoke
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import agent_create, human_create, token_authenticate
from dispatch.services.proposals import proposal_create
from protocols.denials import DenialCode
from tests.conftest import ALL_TOOLS, MAILBOX, World
from tests.support.claims import refused

pytestmark = pytest.mark.django_db

def grant_of(principal: Principal, operation: str) -> Grant:
    return Grant.objects.get(subject=principal, operations=[operation], parent=None)


@pytest.fixture
def colleague(world: World) -> Principal:
    return agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)[0]


def test_a_grant_whose_parent_was_revoked_is_revoked_everywhere(
    world: World, colleague: Principal,
) -> None:
    parent = grant_of(world.owner, "email.send")
    grant_delegate(actor=world.owner, grant_id=parent.id, subject_name=colleague.name,
                   operations=["email.send"], scope={"mailbox": [MAILBOX]}, expires_at=None,
                   now=world.now)
    # The state a lost race used to leave: the parent revoked, its child not.
    Grant.objects.filter(id=parent.id).update(revoked_at=world.now)
    from dispatch.services.resources import resource_create

    draft, _ = resource_create(principal=colleague, kind="email_draft", payload={
        "from": MAILBOX, "to": ["c@example.com"], "subject": "s", "body": "b"}, now=world.now)
    denial = refused(proposal_create, principal=colleague, operation="email.send",
                     arguments={"draft": {"id": draft.id, "revision": 1}}, now=world.now)
    assert denial.code is DenialCode.AUTHORITY_REVOKED


def test_a_grant_whose_parent_expired_is_expired(world: World, colleague: Principal) -> None:
    parent = grant_of(world.owner, "crm.lookup")
    grant_delegate(actor=world.owner, grant_id=parent.id, subject_name=colleague.name,
                   operations=["crm.lookup"], scope={"customer": "*"}, expires_at=None,
                   now=world.now)
    Grant.objects.filter(id=parent.id).update(expires_at=world.now)
    denial = refused(proposal_create, principal=colleague, operation="crm.lookup",
                     arguments={"customer_id": "cus-001"}, now=world.now)
    assert denial.code is DenialCode.AUTHORITY_EXPIRED


def test_revoking_a_grant_revokes_its_unclaimed_permits_only(world: World) -> None:
    claimed_proposal, claimed_permit = world.approved_email()
    proposal_dispatch(principal=world.owner, proposal_id=claimed_proposal.id, now=world.now,
                      enqueue=False)
    waiting_proposal, waiting_permit = world.approved_email()
    grant_revoke(actor=world.admin, grant_id=grant_of(world.owner, "email.send").id,
                 now=world.now)
    assert Permit.objects.get(id=claimed_permit.id).state == "claimed"  # it ran
    assert Permit.objects.get(id=waiting_permit.id).state == "revoked"
    event = AuditEvent.objects.get(kind="grant.revoked")
    assert event.details["permits_revoked"] == [waiting_permit.id]
    assert AuditEvent.objects.filter(kind="permit.revoked",
                                     proposal_id=waiting_proposal.id).count() == 1
    denial = refused(proposal_dispatch, principal=world.owner, proposal_id=waiting_proposal.id,
                     now=world.now, enqueue=False)
    assert denial.code is DenialCode.AUTHORITY_REVOKED


def test_a_deactivated_humans_token_stops_at_once(world: World) -> None:
    human, token = human_create(name="temp", tenant="acme", role="operator", password="pw")
    assert token_authenticate(token) == human
    assert human.user is not None
    human.user.is_active = False
    human.user.save(update_fields=["is_active"])
    assert token_authenticate(token) is None
