"""Fault injection by killing a real child process at the claim, external-call and completion
boundaries (docs/design.md#how-it-is-tested). Nothing runs without a committed claim; a crash after
the claim leaves the operation claimed until reconciliation; a crash after the effect never sends
twice."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, Operation, Permit, Resource
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import operation_resolve, reconcile_operations
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.processes import ROOT, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LATER = timedelta(seconds=20)  # past the demo contracts' 15 s timeout


def crash_at(point: str, world: World, proposal_id: str) -> None:
    """Dispatch in a child process that SIGKILLs itself at `point`."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.crash", world.owner.id, proposal_id],
        cwd=ROOT, env=child_env(DISPATCH_CRASH_AT=point), capture_output=True, text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def emails(destinations: Destinations) -> list[dict[str, object]]:
    return list_all(destinations.directory)["email"]


def test_crash_inside_the_claim_commits_nothing(live: World, destinations: Destinations) -> None:
    proposal, permit = live.approved_email()
    crash_at("claim.before_commit", live, proposal.id)

    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    permit.refresh_from_db()
    assert permit.state == "issued"
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "authorized"
    assert emails(destinations) == []
    # The permit was never consumed, so the action can still be dispatched exactly once.
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    assert operation_execute(operation_id=operation.id).state == "completed"
    assert len(emails(destinations)) == 1


def test_crash_after_the_claim_runs_the_handler_once_later(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    crash_at("claim.after_commit", live, proposal.id)

    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "claimed"
    assert operation.attempts.count() == 0
    assert Permit.objects.get(id=operation.permit_id).state == "claimed"
    assert emails(destinations) == []
    with pytest.raises(Denial) as denied:
        proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=timezone.now(),
                          enqueue=False)
    assert denied.value.code is DenialCode.PERMIT_CLAIMED
    # Reconciliation sees a claim that never started an attempt: nothing ran, so it runs it.
    counts = reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    assert counts["requeued"] == 1
    assert operation_execute(operation_id=operation.id).state == "completed"
    assert len(emails(destinations)) == 1


def test_crash_before_the_external_call_waits_for_a_human(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    crash_at("attempt.before_call", live, proposal.id)

    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "claimed"
    assert list(operation.attempts.values_list("number", "outcome")) == [(1, "")]
    # A redelivered task must not start a second attempt of a none-idempotency operation.
    assert operation_execute(operation_id=operation.id).attempts.count() == 1
    reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "unknown"  # the sink holds nothing, but absence is no proof
    assert "holds no message" in operation.evidence
    assert emails(destinations) == []
    settled = operation_resolve(admin=live.admin, operation_id=operation.id,
                                outcome="no_effect", evidence="worker died before SMTP",
                                now=timezone.now())
    assert settled.state == "reconciled_no_effect"
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "failed_no_effect"


def test_crash_after_the_email_left_never_sends_twice(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    crash_at("attempt.after_effect", live, proposal.id)

    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "claimed"
    assert len(emails(destinations)) == 1
    # Redelivery, before and after the timeout: still one attempt, still one email.
    operation_execute(operation_id=operation.id)
    operation_execute(operation_id=operation.id, clock=lambda: timezone.now() + LATER)
    assert Attempt.objects.filter(operation=operation).count() == 1
    reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"
    assert len(emails(destinations)) == 1
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "sent"


def test_crash_after_the_transfer_settles_from_the_bank(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(amount="12.5")
    live.grant(proposal)
    crash_at("attempt.after_effect", live, proposal.id)

    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "claimed"
    # A redelivered task after the timeout retries with the same key: the bank deduplicates.
    retried = operation_execute(operation_id=operation.id,
                                clock=lambda: timezone.now() + LATER)
    assert retried.state == "completed"
    assert retried.attempts.count() == 2
    transfers = list_all(destinations.directory)["bank"]
    assert [(t["key"], t["amount"]) for t in transfers] == [(operation.id, "12.50")]


def test_crash_before_the_transfer_is_retried_with_the_same_key(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(amount="7")
    live.grant(proposal)
    crash_at("attempt.before_call", live, proposal.id)

    # One pass: the stale claim becomes unknown; the bank has no such key, so a same-key
    # retry is safe and the operation is claimed again for attempt 2.
    counts = reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 1)
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.state == "claimed"
    assert "no transfer" in operation.evidence
    done = operation_execute(operation_id=operation.id)
    assert done.state == "completed"
    assert list(done.attempts.order_by("number").values_list("number", "outcome")) == [
        (1, "uncertain"), (2, "completed")]
    assert len(list_all(destinations.directory)["bank"]) == 1
