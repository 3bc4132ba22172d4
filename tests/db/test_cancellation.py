"""Cancellation before the claim prevents dispatch; after it, it never frees the permit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo.destinations.runner import list_all
from dispatch.models import Attempt, Operation, Permit, Proposal, Resource
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.execution import operation_execute
from dispatch.services.operations import attempt_start
from dispatch.services.reconciliation import reconcile_operations
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def test_cancel_before_the_claim_prevents_dispatch(live: World,
                                                   destinations: Destinations) -> None:
    proposal, permit = live.approved_email()
    proposal_cancel(actor=live.owner, proposal_id=proposal.id, now=live.now)
    with pytest.raises(Denial) as denied:
        proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                          enqueue=False)
    assert denied.value.code is DenialCode.PROTOCOL_STATE_INVALID
    permit.refresh_from_db()
    assert permit.state == "revoked"
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "draft"
    assert list_all(destinations.directory)["email"] == []


def test_cancel_of_a_pending_approval_revokes_it(world: World) -> None:
    proposal = world.propose_email(world.draft())
    proposal_cancel(actor=world.approver, proposal_id=proposal.id, now=world.now)
    proposal.approval.refresh_from_db()
    assert proposal.approval.state == "revoked"


def test_cancel_after_the_claim_before_any_attempt_is_no_effect(world: World) -> None:
    proposal, permit = world.approved_email()
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    proposal_cancel(actor=world.owner, proposal_id=proposal.id, now=world.now)
    operation.refresh_from_db()
    assert operation.state == "failed_no_effect"
    assert Permit.objects.get(id=permit.id).state == "claimed"  # never freed
    assert operation_execute(operation_id=operation.id).attempts.count() == 0


def test_cancel_during_an_attempt_asks_it_to_stop_and_keeps_the_permit(world: World) -> None:
    """The attempt in flight answers for itself (it sees `HandlerContext.cancelled`); a worker
    that never answers is made unknown by reconciliation, never freed for another action."""
    proposal, permit = world.approved_email()
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    assert attempt_start(operation, 1, world.now)  # a worker is inside the handler
    proposal_cancel(actor=world.owner, proposal_id=proposal.id, now=world.now)
    operation.refresh_from_db()
    assert operation.state == "claimed"
    assert Proposal.objects.get(id=proposal.id).cancelled_at == world.now
    assert Permit.objects.get(id=permit.id).state == "claimed"
    with pytest.raises(Denial) as denied:
        proposal_cancel(actor=world.owner, proposal_id=proposal.id, now=world.now)
    assert denied.value.code is DenialCode.PROTOCOL_STATE_INVALID

    reconcile_operations(now=world.now + timedelta(seconds=16), enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert Attempt.objects.get(operation=operation).outcome == "uncertain"
    assert Permit.objects.get(id=permit.id).state == "claimed"


def test_outsider_cannot_cancel(world: World) -> None:
    proposal = world.propose_email(world.draft())
    with pytest.raises(Denial) as denied:
        proposal_cancel(actor=world.outsider, proposal_id=proposal.id, now=world.now)
    assert denied.value.code is DenialCode.NOT_FOUND
