"""Approvals and permits: pending, denied, expired, decided twice, mismatched, claimed, roles."""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo.destinations.runner import list_all
from dispatch.models import (
    ApprovalRequest,
    AuditEvent,
    Decision,
    Grant,
    Operation,
    Permit,
    Principal,
    Resource,
)
from dispatch.services.authority import grant_revoke
from dispatch.services.principals import human_create
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.worker import operation_execute
from protocols.denials import DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    WRONG_DIGEST,
    budget_used,
    decide,
    dispatch,
    grant_of,
    propose_lookup,
    state_of,
    store,
)
from tests.support.claims import refused
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_dispatch_before_a_decision_is_pending(world: World) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.APPROVAL_PENDING
    assert store() == before


def test_dispatch_after_a_denial_is_denied(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    approval, permit = decide(world, proposal, "deny")
    assert (approval.state, permit) == ("denied", None)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.APPROVAL_DENIED
    assert store() == before
    assert state_of(draft) == "denied"


@pytest.mark.parametrize("late", [60, 61, 7200])
def test_decision_after_the_window_is_expired(world: World, late: int) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft, approval_expires_in=60)
    denial = refused(decide, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=late))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "expired"
    assert not Decision.objects.filter(approval_id=proposal.approval.id).exists()
    assert not Permit.objects.filter(proposal=proposal).exists()
    assert state_of(draft) == "draft"


def test_contract_window_is_an_hour(world: World) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=10 ** 6)
    assert proposal.approval.expires_at == world.now + timedelta(hours=1)
    denial = refused(decide, world=world, proposal=proposal,
                     now=world.now + timedelta(hours=1))
    assert denial.code is DenialCode.APPROVAL_EXPIRED


def test_dispatch_of_a_pending_approval_after_its_window_is_expired(world: World) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=60)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=61))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert store() == before


@pytest.mark.parametrize("late", [60, 3600])
def test_dispatch_after_the_permit_window_is_expired(world: World, late: int) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=60)
    permit = world.grant(proposal)
    assert permit.expires_at == world.now + timedelta(seconds=60)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=late))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


@pytest.mark.parametrize(("first", "second"),
                         [("grant", "grant"), ("grant", "deny"), ("deny", "grant"),
                          ("deny", "deny")])
def test_second_decision_is_refused(world: World, first: str, second: str) -> None:
    proposal = world.propose_email(world.draft())
    decide(world, proposal, first)
    before = store()
    denial = refused(decide, world=world, proposal=proposal, decision=second,
                     approver=world.admin)
    assert denial.code is DenialCode.APPROVAL_DECIDED
    assert store() == before
    assert Decision.objects.filter(approval_id=proposal.approval.id).count() == 1
    assert Permit.objects.filter(proposal=proposal).count() == (first == "grant")


@pytest.mark.parametrize("digest", [WRONG_DIGEST, "", "sha256:", "SHA256:" + "0" * 64])
def test_wrong_digest_at_decision_is_a_mismatch(world: World, digest: str) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(decide, world=world, proposal=proposal, digest=digest)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"


def test_digest_of_another_proposal_at_decision_is_a_mismatch(world: World) -> None:
    proposal = world.propose_email(world.draft())
    other = world.propose_email(world.draft(to=["someone-else@example.com"]))
    assert other.digest != proposal.digest
    before = store()
    denial = refused(decide, world=world, proposal=proposal, digest=other.digest)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before


def test_permit_of_another_proposal_is_a_mismatch(world: World) -> None:
    proposal, permit = world.approved_email()
    _, other_permit = world.approved_email(to=["someone-else@example.com"])
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=other_permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert set(Permit.objects.values_list("state", flat=True)) == {"issued"}
    # Its own permit still runs it.
    assert dispatch(world, proposal, permit_id=permit.id).proposal_id == proposal.id


def test_permit_for_an_operation_without_approval_is_a_mismatch(world: World) -> None:
    _, permit = world.approved_email()
    proposal = propose_lookup(world)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before


@pytest.mark.parametrize("who", ["colleague", "admin", "approver"])
def test_dispatch_by_another_principal_of_the_tenant_is_a_mismatch(
    world: World, colleague: Principal, who: str,
) -> None:
    proposal, permit = world.approved_email()
    principal = {"colleague": colleague, "admin": world.admin, "approver": world.approver}[who]
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=principal)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_second_dispatch_finds_the_permit_claimed(world: World) -> None:
    proposal, permit = world.approved_email()
    operation = dispatch(world, proposal)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert store() == before
    assert list(Operation.objects.values_list("id", flat=True)) == [operation.id]
    assert Permit.objects.get(id=permit.id).state == "claimed"


def test_a_claimed_permit_is_reported_before_anything_that_changed_since(world: World) -> None:
    """Once claimed, the action is out of the dispatcher's hands: a later dispatch hears
    `permit_claimed` even though the grant it rested on has been revoked meanwhile."""
    proposal, permit = world.approved_email()
    _, other_permit = world.approved_email(to=["other@example.com"])
    dispatch(world, proposal)
    # Naming another proposal's permit is still a mismatch, not a claim.
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=other_permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    grant_revoke(actor=world.admin, grant_id=grant_of(world.owner, "email.send").id,
                 now=world.now)
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert denial.details == {"permit_id": permit.id}
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=permit.id)
    assert denial.code is DenialCode.PERMIT_CLAIMED


def test_second_dispatch_without_a_permit_is_claimed_and_holds_no_budget(
    world: World,
) -> None:
    proposal = propose_lookup(world)
    dispatch(world, proposal)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert store() == before
    assert budget_used() == used


@pytest.mark.parametrize("who", ["owner", "no_role", "colleague"])
def test_only_a_human_with_the_role_may_decide(
    world: World, colleague: Principal, who: str,
) -> None:
    no_role, _ = human_create(name="bystander", tenant="acme", role="none", password="pw")
    principal = {"owner": world.owner, "no_role": no_role, "colleague": colleague}[who]
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(decide, world=world, proposal=proposal, approver=principal)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert denial.details == {"role": "operator"}
    assert store() == before


def test_admin_holds_the_operator_role(world: World) -> None:
    proposal = world.propose_email(world.draft())
    _, permit = decide(world, proposal, approver=world.admin)
    assert permit is not None
    assert permit.approver_id == world.admin.id


@pytest.fixture
def unknown(live: World) -> Operation:
    """An email whose response was lost: an `unknown` operation."""
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "unknown"
    return operation


@pytest.mark.parametrize("who", ["approver", "owner"])
def test_only_an_admin_resolves_an_unknown(
    live: World, unknown: Operation, destinations: Destinations, who: str,
) -> None:
    principal = {"approver": live.approver, "owner": live.owner}[who]
    before = store()
    denial = refused(operation_resolve, admin=principal, operation_id=unknown.id,
                     outcome="completed", evidence="I looked", now=live.now)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert denial.details == {"role": "admin"}
    assert store() == before
    assert Operation.objects.get(id=unknown.id).state == "unknown"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_unknown_resource_cannot_be_proposed_again(live: World, unknown: Operation) -> None:
    draft = Resource.objects.get(id=unknown.proposal.resource_refs[0]["id"])
    assert draft.state == "unknown"
    denial = refused(live.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details["state"] == "unknown"


def test_dispatching_an_uncertain_operation_again_is_an_unsafe_retry(
    live: World, unknown: Operation, destinations: Destinations,
) -> None:
    """docs/design.md#audit: the answer says what happened. The effect may have happened, so what
    the agent hears is not "already used" but "not safe to retry; an admin must resolve it"."""
    before = store()
    denial = refused(dispatch, world=live, proposal=unknown.proposal)
    assert denial.code is DenialCode.UNSAFE_RETRY
    assert denial.details == {"operation_id": unknown.id, "state": "unknown"}
    denial = refused(dispatch, world=live, proposal=unknown.proposal,
                     permit_id=unknown.permit_id)
    assert denial.code is DenialCode.UNSAFE_RETRY
    assert store() == before
    assert AuditEvent.objects.filter(kind="dispatch.denied").latest("id").details["code"] == (
        "unsafe_retry")
    assert len(list_all(destinations.directory)["email"]) == 1


def test_dispatching_a_settled_operation_again_is_still_permit_claimed(live: World) -> None:
    proposal, _ = live.approved_email()
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "completed"
    assert refused(dispatch, world=live, proposal=proposal).code is DenialCode.PERMIT_CLAIMED


def test_claimed_operation_cannot_be_resolved(world: World) -> None:
    proposal, _ = world.approved_email()
    operation = dispatch(world, proposal)
    before = store()
    denial = refused(operation_resolve, admin=world.admin, operation_id=operation.id,
                     outcome="completed", evidence="I looked", now=world.now)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before


@pytest.mark.parametrize("who", ["approver", "owner"])
def test_only_an_admin_revokes_a_grant(world: World, who: str) -> None:
    principal = {"approver": world.approver, "owner": world.owner}[who]
    grant = grant_of(world.owner, "email.send")
    before = store()
    denial = refused(grant_revoke, actor=principal, grant_id=grant.id, now=world.now)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert store() == before
    assert Grant.objects.get(id=grant.id).revoked_at is None
