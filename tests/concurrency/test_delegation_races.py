"""Races on a delegated step's record (docs/design.md#delegation), on PostgreSQL, two connections.

One connection holds its transaction open at the racy point until the other is seen waiting
for its lock (`pg_stat_activity`), then commits: the waiter must act on the row as it is
after that commit (READ COMMITTED re-checks only the updated row's own columns), never on the
snapshot it started from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from dispatch.models import AuditEvent, BudgetCounter, Delegation, Grant
from dispatch.services.delegations import (
    Bounds,
    SubAgent,
    delegation_end,
    delegation_open,
    delegation_renew,
    reconcile_delegations,
)
from dispatch.services.executions import execution_create
from protocols.denials import Denial
from tests.conftest import World

pytestmark = [pytest.mark.django_db(transaction=True)]

SUB = SubAgent("researcher", ["crm.lookup"], "scripted", {}, "sha256:x", {})


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row-lock re-checks under READ COMMITTED: PostgreSQL only")


def open_step(world: World, *, budget: int = 2, holder: str = "lse_A",
              execution_id: str | None = None) -> Delegation:
    if execution_id is None:
        execution_id = execution_create(principal=world.owner, adapter="workflow:x",
                                        now=world.now).id
    return delegation_open(
        principal=world.owner, execution_id=execution_id, step="steps[0]",
        bounds=Bounds(["crm.lookup"], {"customer": ["cus-001"]}, 600, budget), sub=SUB,
        holder=holder, now=timezone.now())


def lapse(delegation: Delegation) -> None:
    """The step's lease ran out (a long turn), its worker alive."""
    Delegation.objects.filter(id=delegation.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))


def wait_for_a_lock_waiter(timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock'")
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the second connection never waited for the first one's lock")


def race(holding: Callable[[], Any], waiting: Callable[[], Any]) -> dict[str, Any]:
    """`holding` runs in a transaction kept open until `waiting`, started once `holding`
    returned, waits for its lock; each in a thread of its own (its own connection)."""
    done, release = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                results["holding"] = holding()
                done.set()
                release.wait(30)
        except BaseException as exc:
            results["holding"] = exc
            done.set()
        finally:
            connections.close_all()

    def second() -> None:
        try:
            done.wait(30)
            try:
                results["waiting"] = waiting()
            except Denial as denial:
                results["waiting"] = denial.code.value
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        done.wait(30)
        wait_for_a_lock_waiter()
    finally:
        release.set()
        for thread in threads:
            thread.join(60)
    return results


def test_reconciliation_leaves_a_step_whose_lease_was_renewed_meanwhile(world: World) -> None:
    step = open_step(world)
    lapse(step)
    results = race(lambda: delegation_renew(delegation_id=step.id, holder="lse_A"),
                   lambda: reconcile_delegations(now=timezone.now()))
    assert results == {"holding": True, "waiting": 0}
    step.refresh_from_db()
    assert (step.ended_at, step.holder) == (None, "lse_A")
    assert Grant.objects.get(id=step.grant_id).revoked_at is None


def test_a_step_and_reconciliation_never_both_end_one_delegation(world: World) -> None:
    step = open_step(world)
    lapse(step)
    step = Delegation.objects.select_related("grant").get(id=step.id)
    results = race(lambda: delegation_end(delegation=step, reason="finished", actor="owner",
                                          now=timezone.now(), holder="lse_A"),
                   lambda: reconcile_delegations(now=timezone.now()))
    assert results == {"holding": True, "waiting": 0}
    step.refresh_from_db()
    assert step.end_reason == "finished"
    assert AuditEvent.objects.filter(kind="grant.revoked",
                                     details__grant_id=step.grant_id).count() == 1


def test_a_concurrent_open_of_the_same_step_finds_the_first_ones_record(
    world: World, settings: Any,
) -> None:
    # Room for one carve-out of 60, not two: only the record may tell the loser what happened.
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 100
    run = execution_create(principal=world.owner, adapter="workflow:x", now=world.now)
    results = race(
        lambda: open_step(world, budget=60, holder="lse_A", execution_id=run.id).id,
        lambda: open_step(world, budget=60, holder="lse_B", execution_id=run.id).id)
    assert results["waiting"] == results["holding"]
    assert Delegation.objects.count() == 1
    assert Grant.objects.filter(parent__isnull=False).count() == 1
    assert BudgetCounter.objects.get(key=f"execution:{world.owner.id}:{run.id}").used == 60
