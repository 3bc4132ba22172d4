"""Reconciliation is bounded and observable: a lookup that raises or hangs is inconclusive
for its operation only, one pass at a time, an absence that allows no retry shown to the
admin."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dispatch.models import Attempt, AuditEvent, Operation
from dispatch.services import reconciliation
from dispatch.services.leases import lease
from dispatch.services.operations import attempt_start
from dispatch.services.reconciliation import (
    operation_reconcile,
    reconcile_operations,
)
from tests.conftest import World
from tests.support.claims import LATER, claimed_transfer

pytestmark = pytest.mark.django_db

def unknown_transfers(world: World, count: int) -> list[Operation]:
    operations = []
    for _ in range(count):
        operation = claimed_transfer(world)
        assert attempt_start(operation, 1, world.now)
        operations.append(operation)
    reconcile_operations(now=world.now + LATER, enqueue=False)
    return operations


def test_a_lookup_that_raises_is_inconclusive_for_its_operation_only(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken, fine = unknown_transfers(world, 2)

    def bank_lookup(base_url: str, key: str, timeout: float) -> dict[str, Any] | None:
        if key == broken.id:
            raise RuntimeError("the bank's lookup API fell over")
        return {"key": key}

    monkeypatch.setattr("demo.handlers.bank_lookup", bank_lookup)
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert (counts["reconciled"], counts["inconclusive"]) == (1, 1)
    broken.refresh_from_db()
    fine.refresh_from_db()
    assert fine.state == "reconciled_completed"
    assert broken.state == "unknown"
    assert "RuntimeError: the bank's lookup API fell over" in broken.evidence
    assert AuditEvent.objects.filter(kind="operation.evidence", operation_id=broken.id,
                                     details__evidence=broken.evidence).count() == 1
    # The same evidence again is not a new event.
    events = AuditEvent.objects.filter(kind="operation.evidence", operation_id=broken.id)
    before = events.count()
    reconcile_operations(now=world.now + LATER, enqueue=False)
    assert events.count() == before


def test_a_lookup_that_hangs_is_bounded(
    world: World, monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:
    (operation,) = unknown_transfers(world, 1)
    settings.RECONCILE_LOOKUP_TIMEOUT = 0.3

    def bank_lookup(base_url: str, key: str, timeout: float) -> dict[str, Any] | None:
        time.sleep(5)
        return None

    monkeypatch.setattr("demo.handlers.bank_lookup", bank_lookup)
    started = time.monotonic()
    assert operation_reconcile(operation_id=operation.id, now=world.now + LATER,
                               enqueue=False) == "inconclusive"
    assert time.monotonic() - started < 3
    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert "no answer within 0.3s" in operation.evidence


def test_one_reconciliation_pass_at_a_time(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    (operation,) = unknown_transfers(world, 1)
    monkeypatch.setattr("demo.handlers.bank_lookup",
                        lambda base_url, key, timeout: {"key": key})
    with lease("reconcile-pass", ttl=60) as held:
        assert held
        assert reconcile_operations(now=world.now + LATER, enqueue=False)["skipped"] is True
        with lease(f"reconcile:{operation.id}", ttl=60):
            assert operation_reconcile(operation_id=operation.id, now=world.now + LATER,
                                       enqueue=False) is None
        assert operation_reconcile(operation_id=operation.id, now=world.now + LATER,
                                   enqueue=False) == "reconciled"
    operation.refresh_from_db()
    assert operation.state == "reconciled_completed"
    assert "skipped" not in reconcile_operations(now=world.now + LATER, enqueue=False)


def test_an_absence_that_allows_no_retry_is_shown_to_the_admin(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (operation,) = unknown_transfers(world, 1)
    Operation.objects.filter(id=operation.id).update(attempts_made=3)  # every attempt used
    Attempt.objects.filter(operation=operation).update(number=3)
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    assert reconciliation.operation_reconcile(operation_id=operation.id, now=world.now + LATER,
                                              enqueue=False) == "inconclusive"
    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert operation.evidence == (f"absent per lookup: bank has no transfer with key "
                                  f"{operation.id}; no retry: all 3 attempts used")
