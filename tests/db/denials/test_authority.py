"""Authority refused: out of scope, missing, expired, revoked, or outside the policy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from demo.destinations.runner import list_all
from dispatch.models import (
    ApprovalRequest,
    Grant,
    Permit,
    Principal,
    Resource,
)
from dispatch.services.authority import grant_delegate, grant_issue, grant_revoke
from dispatch.services.principals import agent_create
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create
from protocols.denials import DenialCode
from tests.conftest import ALL_TOOLS, MAILBOX, World
from tests.db.denials.support import (
    PAYLOAD,
    decide,
    dispatch,
    email_arguments,
    grant_of,
    propose_lookup,
    state_of,
    store,
)
from tests.support.claims import refused
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_sender_outside_the_grants_mailbox_is_a_scope_violation(world: World) -> None:
    draft = world.draft(sender="sales@acme.example")
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": "mailbox", "value": "sales@acme.example"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_account_outside_the_grant_is_a_scope_violation(world: World) -> None:
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments={"from_account": "acct-002", "to_account": "acct-999",
                                "amount": "10", "currency": "EUR"}, now=world.now)
    assert denial.code is DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": "account", "value": "acct-002"}
    assert store() == before


def test_agent_without_a_grant_has_no_authority(world: World) -> None:
    newcomer, _ = agent_create(name="newcomer", tenant="acme", tools=ALL_TOOLS)
    before = store()
    denial = refused(propose_lookup, world=world, principal=newcomer)
    assert denial.code is DenialCode.AUTHORITY_MISSING
    assert denial.details == {"operation": "crm.lookup"}
    assert store() == before


def test_grant_for_another_operation_is_no_authority(world: World) -> None:
    newcomer, _ = agent_create(name="newcomer", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=newcomer, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=world.now)
    denial = refused(propose_lookup, world=world, principal=newcomer)
    assert denial.code is DenialCode.AUTHORITY_MISSING


@pytest.fixture
def short_lived(world: World) -> Principal:
    """An agent whose only grant (crm.lookup, email.send) lasts 60 seconds from `now`."""
    agent, _ = agent_create(name="short-lived", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=agent, operations=["crm.lookup", "email.send"],
                scope={"customer": "*", "mailbox": [MAILBOX]}, now=world.now, expires_in=60)
    return agent


@pytest.mark.parametrize("seconds", [60, 61, 3600])
def test_expired_grant_is_refused_at_proposal(
    world: World, short_lived: Principal, seconds: int,
) -> None:
    before = store()
    denial = refused(propose_lookup, world=world, principal=short_lived,
                     now=world.now + timedelta(seconds=seconds))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before


def test_grant_within_its_window_allows_a_proposal(
    world: World, short_lived: Principal,
) -> None:
    proposal = propose_lookup(world, principal=short_lived,
                              now=world.now + timedelta(seconds=59))
    assert proposal.principal_id == short_lived.id


def test_grant_expired_since_the_proposal_is_refused_at_dispatch(
    world: World, short_lived: Principal,
) -> None:
    proposal = propose_lookup(world, principal=short_lived)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=short_lived,
                     now=world.now + timedelta(seconds=61))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before


def test_grant_expired_after_approval_is_refused_at_dispatch(
    world: World, short_lived: Principal,
) -> None:
    draft, _ = resource_create(principal=short_lived, kind="email_draft", payload=PAYLOAD,
                               now=world.now)
    proposal = proposal_create(principal=short_lived, operation="email.send",
                               arguments=email_arguments(draft), now=world.now)
    _, permit = decide(world, proposal)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=short_lived,
                     now=world.now + timedelta(seconds=90))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"


def _revoke_email_grant(world: World) -> None:
    grant_revoke(actor=world.admin, grant_id=grant_of(world.owner, "email.send").id,
                 now=world.now)


def test_revoked_grant_is_refused_at_proposal(world: World) -> None:
    draft = world.draft()
    _revoke_email_grant(world)
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert denial.details == {"operation": "email.send"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_grant_revoked_before_the_decision_is_refused_at_decision(world: World) -> None:
    proposal = world.propose_email(world.draft())
    _revoke_email_grant(world)
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"


def test_grant_revoked_after_approval_is_refused_at_dispatch(
    live: World, destinations: Destinations,
) -> None:
    proposal, permit = live.approved_email()
    _revoke_email_grant(live)
    before = store()
    denial = refused(dispatch, world=live, proposal=proposal)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before
    # Revoking the grant revoked the unclaimed permit resting on it (the human's decision
    # stands); the draft is a draft again, for a new proposal under new authority.
    assert Permit.objects.get(id=permit.id).state == "revoked"
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "granted"
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "draft"
    assert list_all(destinations.directory)["email"] == []


def test_revoked_parent_cannot_be_delegated(world: World, colleague: Principal) -> None:
    _revoke_email_grant(world)
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=colleague.name, operations=["email.send"],
                     scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before


def test_revoking_a_grant_revokes_its_delegations(world: World) -> None:
    delegate, _ = agent_create(name="delegate", tenant="acme", tools=ALL_TOOLS)
    child = grant_delegate(actor=world.owner, grant_id=grant_of(world.owner, "email.send").id,
                           subject_name=delegate.name, operations=["email.send"],
                           scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    draft, _ = resource_create(principal=delegate, kind="email_draft", payload=PAYLOAD,
                               now=world.now)
    _revoke_email_grant(world)
    denial = refused(proposal_create, principal=delegate, operation="email.send",
                     arguments=email_arguments(draft), now=world.now)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert Grant.objects.get(id=child.id).revoked_at == world.now


def test_policy_without_financial_write_refuses_a_transfer(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    email_only_policy()
    before = store()
    denial = refused(world.propose_transfer)
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED
    assert denial.status == 403
    assert denial.details == {"effects": ["financial_write"]}
    assert store() == before
    # The same policy still allows an email: the refusal is about the effect, not the agent.
    assert world.propose_email(world.draft()).operation == "email.send"


def test_policy_tightened_before_the_decision_is_refused_at_decision(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    proposal = world.propose_transfer()
    email_only_policy()
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED
    assert store() == before


def test_policy_tightened_after_approval_is_refused_at_dispatch(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    """The permit binds the policy fingerprint: a changed policy is a fingerprint mismatch."""
    proposal = world.propose_transfer()
    permit = world.grant(proposal)
    email_only_policy()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert denial.details == {"reason": "deployment policy changed"}
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
