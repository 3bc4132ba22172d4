"""The worker runs what was approved: a destination changed after the claim sends nothing,
and an attempt still within its timeout is left to its worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent
from dispatch.services.operations import attempt_start
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.claims import LATER, claimed_transfer
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

@pytest.fixture
def moved_bank(settings: Any, destinations: Destinations) -> Iterator[None]:
    """The same bank under another address: the deployment's destination changed."""
    from dispatch.runtime import get_runtime

    yield
    settings.DESTINATIONS = {**settings.DESTINATIONS,
                             "bank_url": f"http://localhost:{destinations.bank_port}"}
    get_runtime.cache_clear()


def test_a_destination_changed_after_the_claim_sends_nothing(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    operation = claimed_transfer(live)
    settings.DESTINATIONS = {**settings.DESTINATIONS,
                             "bank_url": f"http://localhost:{destinations.bank_port}"}
    done = operation_execute(operation_id=operation.id)
    assert done.state == "failed_no_effect"
    assert Attempt.objects.filter(operation=operation).count() == 0
    event = AuditEvent.objects.get(kind="operation.failed_no_effect", operation_id=operation.id)
    assert event.details["code"] == "contract_mismatch"
    assert "destination changed" in event.details["reason"]
    assert list_all(destinations.directory)["bank"] == []


def test_a_destination_changed_after_an_uncertain_attempt_is_never_retried(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    operation = claimed_transfer(live)
    assert attempt_start(operation, 1, live.now)  # the worker died before its call
    settings.DESTINATIONS = {**settings.DESTINATIONS,
                             "bank_url": f"http://localhost:{destinations.bank_port}"}
    counts = reconcile_operations(now=live.now + LATER, enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 0)
    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert operation.evidence.startswith("absent per lookup")
    assert "no retry: contract_mismatch" in operation.evidence
    assert operation_execute(operation_id=operation.id).state == "unknown"
    assert list_all(destinations.directory)["bank"] == []


def test_a_worker_that_finds_a_changed_destination_never_leaves_a_lost_attempt_insert(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    """docs/design.md#outcomes: the worker that died left attempt 1 open; the
    redelivered task, past the contract timeout, finds the destination moved: it sends nothing, and
    ends the attempt as uncertain (the operation is unknown, for a human) instead of leaving it."""
    operation = claimed_transfer(live)
    assert attempt_start(operation, 1, live.now)
    settings.DESTINATIONS = {**settings.DESTINATIONS,
                             "bank_url": f"http://localhost:{destinations.bank_port}"}
    done = operation_execute(operation_id=operation.id, clock=lambda: live.now + LATER)
    assert done.state == "unknown"
    attempt = Attempt.objects.get(operation=operation)
    assert attempt.ended_at is not None and attempt.outcome == "uncertain"
    assert "contract_mismatch" in attempt.error
    event = AuditEvent.objects.get(kind="operation.unknown", operation_id=operation.id)
    assert event.details["code"] == "contract_mismatch"
    assert list_all(destinations.directory)["bank"] == []


def test_an_attempt_still_within_its_timeout_is_left_to_its_worker(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    operation = claimed_transfer(live)
    assert attempt_start(operation, 1, live.now)
    settings.DESTINATIONS = {**settings.DESTINATIONS,
                             "bank_url": f"http://localhost:{destinations.bank_port}"}
    assert operation_execute(operation_id=operation.id, clock=lambda: live.now).state == (
        "claimed")
    assert Attempt.objects.get(operation=operation).ended_at is None
    assert list_all(destinations.directory)["bank"] == []
