"""The handler runs on real Celery workers over a real Redis broker
(docs/design.md#outcomes, #dispatcher).

Broker redelivery (a worker SIGKILLed mid-task, a duplicate message, two workers) never yields
a second claim or a second effect: the store decides what a delivered task may do.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import reconcile_operations
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.workers import wait_for, worker_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

LATER = timedelta(seconds=20)


def claim(world: World, proposal_id: str) -> Operation:
    return proposal_dispatch(principal=world.owner, proposal_id=proposal_id,
                             now=timezone.now(), enqueue=False)


def state_of(operation: Operation) -> str:
    operation.refresh_from_db()
    return operation.state


def test_worker_completes_an_approved_email(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    with worker_pool(tmp_path) as pool:
        pool.start()
        proposal, _ = live.approved_email()
        operation = claim(live, proposal.id)
        pool.send(operation.id)
        wait_for(lambda: state_of(operation) == "completed", 30, "the worker to complete")
    assert len(list_all(destinations.directory)["email"]) == 1


def test_killed_worker_with_a_hanging_email_never_sends_twice(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    with worker_pool(tmp_path, visibility_timeout=5) as pool:
        first = pool.start()
        proposal, _ = live.approved_email(to=["x@hang.test"])
        operation = claim(live, proposal.id)
        pool.send(operation.id)
        wait_for(lambda: list_all(destinations.directory)["email"], 30,
                 "the sink to hold the message")
        first.kill()
        second = pool.start()
        # The broker redelivers the unacknowledged task to the new worker, which finds the
        # attempt open for a none-idempotency operation and does nothing.
        wait_for(lambda: second.output().count("operation_execute") >= 2, 60,
                 "the redelivered task to be received and finish")
        assert Attempt.objects.filter(operation=operation).count() == 1
        assert state_of(operation) == "claimed"
    reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    assert state_of(operation) == "reconciled_completed"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_killed_worker_with_a_hanging_payment_retries_the_same_key(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    # Redelivery comes after the 15 s contract timeout, so the new worker may retry.
    with worker_pool(tmp_path, visibility_timeout=16) as pool:
        first = pool.start()
        proposal = live.propose_transfer(amount="30", memo="hang.test")
        live.grant(proposal)
        operation = claim(live, proposal.id)
        pool.send(operation.id)
        wait_for(lambda: list_all(destinations.directory)["bank"], 30,
                 "the bank to record the transfer")
        first.kill()
        pool.start()
        wait_for(lambda: state_of(operation) != "claimed", 90,
                 "the redelivered task to retry and settle")
    attempts = Attempt.objects.filter(operation=operation).count()
    assert attempts >= 2
    reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    assert state_of(operation) in ("completed", "reconciled_completed")
    transfers = list_all(destinations.directory)["bank"]
    assert [(t["key"], t["amount"]) for t in transfers] == [(operation.id, "30.00")]


def test_two_workers_and_a_duplicate_message_make_one_effect(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    with worker_pool(tmp_path) as pool:
        pool.start()
        pool.start()
        proposal, _ = live.approved_email()
        operation = claim(live, proposal.id)
        for _ in range(3):  # the original and two redeliveries, spread over both workers
            pool.send(operation.id)
        wait_for(lambda: state_of(operation) == "completed", 30, "completion")
        wait_for(lambda: sum(w.output().count("succeeded") for w in pool.workers) >= 3, 30,
                 "all three deliveries to be processed")
    assert Attempt.objects.filter(operation=operation).count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1
