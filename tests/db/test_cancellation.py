"""Cancellation (docs/design.md#cancellation) at each point: before the claim it prevents dispatch;
after the claim and before any effect it ends the operation without effect; during an attempt it
asks the handler to stop. It never frees the permit, and every cancellation is audited with its
actor."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, Operation, Permit, Proposal, Resource
from dispatch.services.cancellation import operation_cancel, proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_start
from dispatch.services.principals import agent_create, human_create
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.renewals import operation_reauthorize
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.conftest import ALL_TOOLS, World
from tests.db.test_renewals import LATER, grant, stopped_transfer
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
    assert "already cancelled; the attempt in flight settles it" in denied.value.message
    (event,) = cancellations(proposal.id)
    assert event.details["attempt_in_flight"] is True

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


def refused(call: Callable[..., object], **kwargs: object) -> Denial:
    with pytest.raises(Denial) as caught:
        call(**kwargs)
    return caught.value


def cancellations(proposal_id: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind="proposal.cancelled",
                                          proposal_id=proposal_id).order_by("id"))


def claimed(world: World) -> Operation:
    proposal, _ = world.approved_email()
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


#: Past the delivery fence (three contract timeouts of 15 s) after attempt 1 started: an
#: absence at the bank then proves that attempt 1 did nothing.
PAST_FENCE = timedelta(seconds=46)


def waiting_for_attempt_two(world: World, after: timedelta = PAST_FENCE) -> Operation:
    """A transfer whose attempt 1 a worker started and died in before sending anything;
    reconciliation (`after` the start) made it unknown, found the key absent at the bank and
    moved it back to `claimed` for attempt 2, whose task has not run: claimed, with no attempt
    open. Past the fence the absence is proof; before it, only the bank's dedup allows it."""
    proposal = world.propose_transfer()
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    assert attempt_start(operation, 1, world.now)
    assert reconcile_operations(now=world.now + after, enqueue=False)["retried"] == 1
    operation.refresh_from_db()
    assert (operation.state, operation.attempts_made) == ("claimed", 1)
    assert not Attempt.objects.filter(operation=operation, ended_at__isnull=True).exists()
    return operation


def test_cancel_of_the_operation_before_attempt_one_ends_it_without_effect(
        world: World) -> None:
    operation = claimed(world)
    cancelled = operation_cancel(actor=world.approver, operation_id=operation.id,
                                 now=world.now)
    assert cancelled.state == "failed_no_effect"
    assert Operation.objects.get(id=operation.id).state == "failed_no_effect"
    assert Permit.objects.get(id=operation.permit_id).state == "claimed"  # never freed
    assert Proposal.objects.get(id=operation.proposal_id).cancelled_at == world.now
    assert operation_execute(operation_id=operation.id).attempts.count() == 0  # a late task
    (event,) = cancellations(operation.proposal_id)
    assert (event.actor, event.operation_id) == ("approver", operation.id)
    assert event.details["before_claim"] is False
    assert event.details["outcome"] == "failed_no_effect"


def test_cancel_while_claimed_between_attempts_ends_it_at_once(
    live: World, destinations: Destinations,
) -> None:
    """Reconciliation found attempt 1 absent at the bank and moved the operation back to
    `claimed` for attempt 2, whose task has not run: no attempt is open, so nothing can be
    asked to stop. The cancellation ends the operation itself, as the settlement of attempt 1,
    and the late task sends nothing."""
    operation = waiting_for_attempt_two(live)
    proposal, permit = operation.proposal, operation.permit
    later = live.now + PAST_FENCE
    cancelled = operation_cancel(actor=live.owner, operation_id=operation.id, now=later,
                                 reason="the customer withdrew")
    assert cancelled.state == "failed_no_effect"
    assert operation_execute(operation_id=operation.id).attempts.count() == 1
    assert list_all(destinations.directory)["bank"] == []
    assert Permit.objects.get(id=permit.id).state == "claimed"
    (event,) = cancellations(proposal.id)
    assert event.actor == "owner"
    assert event.details["outcome"] == "failed_no_effect"
    assert event.details["attempt"] == 1
    assert event.details["reason"] == "the customer withdrew"


def test_cancel_after_an_uncertain_attempt_ends_unknown(
    live: World, destinations: Destinations,
) -> None:
    """Attempt 1 moved the money and lost its answer; a renewal put the operation back to
    `claimed` for attempt 2. A cancellation before attempt 2 cannot say "no effect": the
    bank holds the transfer."""
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    grant(live, renewal)  # its task has not run: claimed, attempt 1 closed
    operation.refresh_from_db()
    assert (operation.state, operation.attempts_made) == ("claimed", 1)
    cancelled = operation_cancel(actor=live.owner, operation_id=operation.id,
                                 now=live.now + LATER)
    assert len(list_all(destinations.directory)["bank"]) == 1
    assert cancelled.state == "unknown"


def test_cancel_after_a_retry_on_an_unproven_absence_ends_unknown(
    live: World, destinations: Destinations,
) -> None:
    """Reconciliation moved the operation back to `claimed` for attempt 2 within the delivery
    fence: the bank's dedup allows the retry, but its "absent" does not prove that attempt 1's
    request will not still land. A cancellation then ends it `unknown`."""
    operation = waiting_for_attempt_two(live, after=timedelta(seconds=16))
    cancelled = operation_cancel(actor=live.owner, operation_id=operation.id,
                                 now=live.now + timedelta(seconds=16))
    assert cancelled.state == "unknown"


def test_cancel_of_a_settled_operation_says_its_state(world: World) -> None:
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, now=world.now)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=world.owner, proposal_id=proposal.id, now=world.now, enqueue=False).id)
    assert operation.state == "completed"
    for call, key in ((operation_cancel, {"operation_id": operation.id}),
                      (proposal_cancel, {"proposal_id": proposal.id})):
        denial = refused(call, actor=world.owner, now=world.now, **key)
        assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
        assert "'completed'" in denial.message
    assert cancellations(proposal.id) == []
    assert Proposal.objects.get(id=proposal.id).cancelled_at is None


def test_a_repeated_cancellation_is_refused_as_already_cancelled(world: World) -> None:
    unclaimed = world.propose_email(world.draft())
    proposal_cancel(actor=world.owner, proposal_id=unclaimed.id, now=world.now)
    denial = refused(proposal_cancel, actor=world.owner, proposal_id=unclaimed.id,
                     now=world.now)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert "already cancelled" in denial.message

    operation = claimed(world)
    operation_cancel(actor=world.owner, operation_id=operation.id, now=world.now)
    for call, key in ((operation_cancel, {"operation_id": operation.id}),
                      (proposal_cancel, {"proposal_id": operation.proposal_id})):
        denial = refused(call, actor=world.admin, now=world.now, **key)
        assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
        assert "already cancelled" in denial.message
        assert "'failed_no_effect'" in denial.message
    assert len(cancellations(operation.proposal_id)) == 1


def test_the_reason_is_audited_with_the_actions_values_masked(world: World) -> None:
    proposal = world.propose_email(world.draft(subject="Quarterly numbers"))
    proposal_cancel(actor=world.admin, proposal_id=proposal.id, now=world.now,
                    reason="wrong subject: Quarterly numbers")
    (event,) = cancellations(proposal.id)
    assert event.actor == "admin"
    assert event.details["before_claim"] is True
    assert event.details["reason"] == "wrong subject: [payload]"


def test_only_the_proposer_an_operator_or_an_admin_may_cancel(world: World) -> None:
    """Another agent of the tenant and a human without a role: `role_required`; another
    tenant's people and forged ids: `not_found`, as for reading."""
    other_agent, _ = agent_create(name="other-agent", tenant="acme", tools=ALL_TOOLS)
    roleless, _ = human_create(name="viewer", tenant="acme", role="", password="pw")
    operation = claimed(world)
    for actor, code in ((other_agent, DenialCode.ROLE_REQUIRED),
                        (roleless, DenialCode.ROLE_REQUIRED),
                        (world.outsider, DenialCode.NOT_FOUND),
                        (world.outsider_operator, DenialCode.NOT_FOUND)):
        assert refused(operation_cancel, actor=actor, operation_id=operation.id,
                       now=world.now).code is code, actor.name
        assert refused(proposal_cancel, actor=actor, proposal_id=operation.proposal_id,
                       now=world.now).code is code, actor.name
    for forged in ("op_missing", 7, None):
        assert refused(operation_cancel, actor=world.admin, operation_id=forged,
                       now=world.now).code is DenialCode.NOT_FOUND
    assert Operation.objects.get(id=operation.id).state == "claimed"
    assert cancellations(operation.proposal_id) == []


def test_two_cancellations_racing_before_the_claim_withdraw_once(world: World) -> None:
    """Both read the proposal open; the second to write finds it cancelled and writes
    nothing (no second release, no second audit event)."""
    from dispatch.services.cancellation import _cancel_before_claim

    proposal = world.propose_email(world.draft())
    stale = Proposal.objects.get(id=proposal.id)
    proposal_cancel(actor=world.owner, proposal_id=proposal.id, now=world.now)
    assert _cancel_before_claim(stale, world.approver, world.now, "late") is False
    assert [e.actor for e in cancellations(proposal.id)] == ["owner"]
