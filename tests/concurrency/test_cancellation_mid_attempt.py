"""Cancellation is real (docs/design.md#cancellation): a cancellation committed while an attempt
runs reaches the handler in its worker process. Stopped before its effect, the outcome is
failed_no_effect and nothing was sent; past its effect, the outcome says what happened."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, Operation, Permit
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from tests.concurrency.test_delegation_races import wait_for_a_lock_waiter
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.paused import PausedChild

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.parametrize(("pause", "outcome", "sent"), [
    ("attempt.before_call", "failed_no_effect", 0),
    ("attempt.after_effect", "completed", 1),
])
def test_cancel_mid_attempt_is_honest(
    live: World, destinations: Destinations, tmp_path: Path, pause: str, outcome: str,
    sent: int,
) -> None:
    proposal, permit = live.approved_email()
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    with PausedChild(tmp_path, "execute", operation.id, pause=pause) as worker:
        worker.reached()  # attempt 1 is recorded and running
        proposal_cancel(actor=live.owner, proposal_id=proposal.id, now=timezone.now())
        assert Operation.objects.get(id=operation.id).state == "claimed"
        assert worker.result() == {"state": outcome}
    assert len(list_all(destinations.directory)["email"]) == sent
    attempt = Attempt.objects.get(operation_id=operation.id)
    assert attempt.outcome == outcome
    if outcome == "failed_no_effect":
        assert "cancelled before the effect" in attempt.error
    assert Permit.objects.get(id=permit.id).state == "claimed"  # never freed


def test_cancel_over_the_api_mid_attempt_stops_the_handler_in_its_worker(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    """The agent's `POST operations/{id}/cancel/` while attempt 1 runs in another process:
    the answer is the operation still `claimed` (its attempt answers for itself), the handler
    sees the cancellation before its effect, and nothing is sent."""
    proposal, permit = live.approved_email()
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    with PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_call") as worker:
        worker.reached()
        response = Client().post(f"/api/v1/operations/{operation.id}/cancel/",
                                 data=json.dumps({"reason": "wrong customer"}),
                                 content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {live.owner_token}")
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["state"] == "claimed"
        assert [(a["number"], a["ended_at"]) for a in body["attempts"]] == [(1, None)]
        assert worker.result() == {"state": "failed_no_effect"}
    assert list_all(destinations.directory)["email"] == []
    assert Permit.objects.get(id=permit.id).state == "claimed"
    again = Client().post(f"/api/v1/operations/{operation.id}/cancel/", data="{}",
                          content_type="application/json",
                          HTTP_AUTHORIZATION=f"Bearer {live.owner_token}")
    assert again.status_code == 409
    assert again.json()["error"]["details"] == {"state": "failed_no_effect"}


def test_no_attempt_starts_under_a_cancellation_that_holds_the_operation(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    """A cancellation of an operation claimed before attempt 1 holds its row while it decides;
    a worker that comes for attempt 1 meanwhile waits, then finds it ended: no attempt, nothing
    sent, the permit still used."""
    proposal, permit = live.approved_email()
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    with PausedChild(tmp_path, "cancel", live.approver.id, operation.id,
                     pause="cancel.locked") as cancel:
        cancel.reached()
        # Paused only if it wrongly got an attempt; it would then wait for release below.
        with PausedChild(tmp_path, "execute", operation.id,
                         pause="attempt.before_call") as worker:
            if connection.vendor == "postgresql":
                wait_for_a_lock_waiter()  # the worker's attempt start waits for the row
            else:
                # The worker's write waits for the cancellation's BEGIN IMMEDIATE whenever it
                # comes; give it the time to start and come while the lock is held.
                time.sleep(3)
            assert cancel.result() == {"state": "failed_no_effect"}
            worker.result()
    assert Operation.objects.get(id=operation.id).state == "failed_no_effect"
    assert not Attempt.objects.filter(operation_id=operation.id).exists()
    assert list_all(destinations.directory)["email"] == []
    assert Permit.objects.get(id=permit.id).state == "claimed"
