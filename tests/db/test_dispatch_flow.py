"""The dispatcher end to end against the real SMTP sink and bank subprocess."""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo.destinations.runner import list_all
from dispatch.models import AuditEvent, Operation, Resource
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import operation_resolve, reconcile_operations
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def dispatch_now(world: World, proposal: object) -> Operation:
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,  # type: ignore[attr-defined]
                                  now=world.now, enqueue=False)
    return operation_execute(operation_id=operation.id)


def test_approved_email_is_sent_once(live: World, destinations: Destinations) -> None:
    proposal, _ = live.approved_email()
    operation = dispatch_now(live, proposal)
    assert operation.state == "completed"
    assert operation.result == {"message_id": f"{operation.id}@console.invalid"}
    messages = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in messages] == [f"{operation.id}@console.invalid"]
    assert messages[0]["to"] == ["customer@example.com"]
    resource = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    assert resource.state == "sent"
    kinds = list(AuditEvent.objects.filter(proposal_id=proposal.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds == ["proposal.created", "approval.requested", "approval.granted",
                     "permit.claimed", "attempt.started", "operation.completed"]


def test_redelivered_execution_runs_nothing(live: World, destinations: Destinations) -> None:
    proposal, _ = live.approved_email()
    operation = dispatch_now(live, proposal)
    again = operation_execute(operation_id=operation.id)
    assert again.state == "completed"
    assert again.attempts.count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1


def test_fail_before_is_a_definite_no_effect(live: World, destinations: Destinations) -> None:
    proposal, _ = live.approved_email(to=["x@fail-before.test"])
    operation = dispatch_now(live, proposal)
    assert operation.state == "failed_no_effect"
    assert list_all(destinations.directory)["email"] == []
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "failed_no_effect"


def test_lost_email_response_is_unknown_and_never_retried(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = dispatch_now(live, proposal)
    assert operation.state == "unknown"
    assert operation.attempts.count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1
    # Reconciliation finds the message by id and settles it; no second send.
    counts = reconcile_operations(now=live.now + timedelta(seconds=1), enqueue=False)
    assert counts["reconciled"] == 1
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"
    assert "holds message" in operation.evidence
    assert len(list_all(destinations.directory)["email"]) == 1
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "sent"


def test_hanging_email_is_unknown_after_the_timeout(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email(to=["x@hang.test"])
    operation = dispatch_now(live, proposal)
    assert operation.state == "unknown"
    assert len(list_all(destinations.directory)["email"]) <= 1


def test_payment_lost_once_is_retried_with_the_same_key(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(amount="25", memo="lose-response-once.test")
    live.grant(proposal)
    operation = dispatch_now(live, proposal)
    assert operation.state == "completed"
    attempts = list(operation.attempts.order_by("number").values_list("number", "outcome"))
    assert attempts == [(1, "uncertain"), (2, "completed")]
    transfers = list_all(destinations.directory)["bank"]
    assert [(t["key"], t["amount"]) for t in transfers] == [(operation.id, "25.00")]


def test_payment_always_lost_stops_after_three_attempts(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(memo="lose-response.test")
    live.grant(proposal)
    operation = dispatch_now(live, proposal)
    assert operation.state == "unknown"
    assert operation.attempts.count() == 3
    assert len(list_all(destinations.directory)["bank"]) == 1
    reconcile_operations(now=live.now + timedelta(seconds=1), enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"


def test_admin_resolves_an_unknown_with_evidence(live: World, destinations: Destinations) -> None:
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = dispatch_now(live, proposal)
    resolved = operation_resolve(admin=live.admin, operation_id=operation.id,
                                 outcome="no_effect", evidence="bounced, checked by hand",
                                 now=live.now)
    assert resolved.state == "reconciled_no_effect"
    assert resolved.evidence == "bounced, checked by hand"
    assert AuditEvent.objects.filter(operation_id=operation.id,
                                     kind="operation.reconciled").count() == 1


def test_lookup_without_approval_completes(live: World) -> None:
    from dispatch.services.proposals import proposal_create

    proposal = proposal_create(principal=live.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-002"}, now=live.now)
    assert proposal.canonical.count("cus-002") == 1
    operation = dispatch_now(live, proposal)
    assert operation.state == "completed"
    assert operation.result == {"customer_id": "cus-002", "name": "Grace Hopper",
                                "tier": "silver"}
