"""Resource states and revisions: stale, dispatching, sent, denied."""

from __future__ import annotations

import pytest

from demo.destinations.runner import list_all
from dispatch.models import (
    ApprovalRequest,
    Permit,
    Resource,
)
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import revision_create
from dispatch.services.worker import operation_execute
from protocols.denials import DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    PAYLOAD,
    decide,
    dispatch,
    edit,
    email_arguments,
    state_of,
    store,
)
from tests.support.claims import refused
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_edit_after_approval_is_stale_at_dispatch(world: World) -> None:
    proposal, permit = world.approved_email()
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    edited = edit(world, draft)
    assert (edited.current_revision, edited.state) == (2, "draft")
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details["current_revision"] == 2
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_edit_before_the_decision_is_stale_at_decision(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    edit(world, Resource.objects.get(id=draft.id))
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.STALE_REVISION
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"
    assert not Permit.objects.filter(proposal=proposal).exists()


def test_proposal_of_an_old_revision_is_stale(world: World) -> None:
    draft = world.draft()
    edit(world, draft)
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft, revision=1), now=world.now)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details["current_revision"] == 2
    assert store() == before


@pytest.mark.parametrize("revision", [2, 99])
def test_proposal_of_a_future_revision_is_stale(world: World, revision: int) -> None:
    draft = world.draft()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft, revision=revision), now=world.now)
    assert denial.code is DenialCode.STALE_REVISION


def test_edit_of_an_old_revision_is_stale(world: World) -> None:
    draft = world.draft()
    edit(world, draft, "first edit")
    before = store()
    denial = refused(revision_create, principal=world.owner, resource_id=draft.id,
                     base_revision=1, payload={**PAYLOAD, "subject": "lost update"},
                     now=world.now)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details == {"current_revision": 2, "resource_id": draft.id}
    assert store() == before


def test_resource_being_dispatched_cannot_be_proposed_or_edited(world: World) -> None:
    proposal, _ = world.approved_email()
    dispatch(world, proposal)
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    assert draft.state == "dispatching"
    before = store()
    proposed = refused(world.propose_email, resource=draft)
    edited = refused(revision_create, principal=world.owner, resource_id=draft.id,
                     base_revision=1, payload=PAYLOAD, now=world.now)
    for denial in (proposed, edited):
        assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
        assert denial.details["state"] == "dispatching"
    assert proposed.details["event"] == "propose"
    assert edited.details["event"] == "edit"
    assert store() == before


def test_sent_resource_cannot_be_proposed_again(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "completed"
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    assert draft.state == "sent"
    before = store()
    denial = refused(live.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details == {"protocol": "email_draft", "state": "sent", "event": "propose"}
    edited = refused(revision_create, principal=live.owner, resource_id=draft.id,
                     base_revision=1, payload=PAYLOAD, now=live.now)
    assert edited.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before
    assert len(list_all(destinations.directory)["email"]) == 1


def test_denied_draft_cannot_be_proposed_until_edited(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    decide(world, proposal, "deny")
    assert state_of(draft) == "denied"
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before
    assert world.propose_email(edit(world, draft)).resource_refs[0]["revision"] == 2
