"""Renewed approval under races, across OS processes on the real database (docs/design.md#renewals):
a revocation that commits between a renewal's checks and its transaction refuses the grant,
and of two operators granting one renewal at once exactly one moves the operation."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from django.utils import timezone

from dispatch.models import AuditEvent, Grant, Operation, Renewal
from dispatch.services.authority import grant_revoke
from dispatch.services.principals import human_create
from dispatch.services.renewals import operation_reauthorize
from tests.conftest import World, make_world
from tests.db.test_renewals import stopped_transfer
from tests.support.destinations import Destinations
from tests.support.paused import PausedChild

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAUSE = "renewal.before_transaction"


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


def requested(world: World) -> tuple[Operation, Renewal]:
    operation = stopped_transfer(world)
    return operation, operation_reauthorize(actor=world.admin, operation_id=operation.id,
                                            now=timezone.now())


def test_a_revocation_committed_before_the_renewals_transaction_refuses_it(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    operation, renewal = requested(live)
    with PausedChild(tmp_path, "renew", live.approver.id, renewal.id, renewal.digest,
                     pause=PAUSE) as child:
        child.reached()  # every check passed, authority not yet locked
        root = Grant.objects.get(subject=live.owner, operations=["payments.transfer"])
        grant_revoke(actor=live.admin, grant_id=root.id, now=timezone.now())
        child.release()
        assert child.result() == {"denied": "authority_revoked"}
    assert Operation.objects.get(id=operation.id).state == "unknown"
    assert Renewal.objects.get(id=renewal.id).state == "pending"
    assert not AuditEvent.objects.filter(kind="renewal.granted").exists()


def test_of_two_operators_granting_one_renewal_one_moves_the_operation(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    operation, renewal = requested(live)
    other, _ = human_create(name="olive", tenant="acme", role="operator", password="pw")
    with PausedChild(tmp_path, "renew", live.approver.id, renewal.id, renewal.digest,
                     pause=PAUSE) as first, \
            PausedChild(tmp_path, "renew", other.id, renewal.id, renewal.digest,
                        pause=PAUSE) as second:
        first.reached()
        second.reached()  # both checked the renewal pending and the operation unknown
        first.release()
        second.release()
        answers = sorted([first.result(), second.result()], key=str)
    assert answers == [{"denied": "approval_decided"}, {"state": "granted"}]
    moved = Operation.objects.get(id=operation.id)
    assert (moved.state, moved.attempts_made) == ("claimed", 1)
    assert AuditEvent.objects.filter(kind="operation.retried",
                                     operation_id=operation.id).count() == 1
    assert AuditEvent.objects.filter(kind="renewal.granted").count() == 1


def test_an_admin_resolving_while_a_renewal_is_granted_leaves_one_outcome(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    """The grant has checked the operation unknown; an admin resolves it before the grant's
    transaction, withdrawing the renewal with it: the grant finds the renewal decided and
    rolls back whole, nothing is attempted again."""
    from dispatch.services.reconciliation import operation_resolve

    operation, renewal = requested(live)
    with PausedChild(tmp_path, "renew", live.approver.id, renewal.id, renewal.digest,
                     pause=PAUSE) as child:
        child.reached()
        operation_resolve(admin=live.admin, operation_id=operation.id, outcome="completed",
                          evidence="the bank shows the transfer", now=timezone.now())
        child.release()
        assert child.result() == {"denied": "approval_decided"}
    moved = Operation.objects.get(id=operation.id)
    assert (moved.state, moved.attempts_made) == ("reconciled_completed", 1)
    assert Renewal.objects.get(id=renewal.id).state == "revoked"  # withdrawn
    assert not AuditEvent.objects.filter(kind__in=["renewal.granted", "operation.retried"],
                                         operation_id=operation.id).exists()
