"""A stale attempt cannot settle its operation: a late answer of an older attempt is kept as
evidence only."""

from __future__ import annotations

import pytest

from dispatch.models import Attempt, AuditEvent, Operation
from dispatch.services.operations import attempt_start
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.worker import _settle_attempt
from tests.conftest import World
from tests.support.claims import LATER, claimed_transfer

pytestmark = pytest.mark.django_db

def test_a_late_answer_of_an_older_attempt_is_kept_as_evidence_only(world: World) -> None:
    operation = claimed_transfer(world)
    assert attempt_start(operation, 1, world.now)
    reconcile_operations(now=world.now + LATER, enqueue=False)  # stale: unknown, bank absent?
    operation.refresh_from_db()
    # No bank runs here: the lookup is inconclusive, so an admin-style retry is simulated by a
    # second attempt the store allows only after the first was ended by the reconciler.
    assert operation.state == "unknown"
    stale = Operation.objects.select_related("proposal").get(id=operation.id)
    stale.state, stale.attempts_made = "claimed", 1  # what worker 1 still believes
    _settle_attempt(stale, 1, Attempt.Outcome.FAILED_NO_EFFECT, None, "refused", world.now)
    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert AuditEvent.objects.filter(kind="attempt.ignored", operation_id=operation.id,
                                     details__outcome="failed_no_effect").count() == 1
    assert not AuditEvent.objects.filter(kind="operation.failed_no_effect").exists()


def test_an_answer_of_attempt_1_never_settles_attempt_2(world: World) -> None:
    operation = claimed_transfer(world)
    assert attempt_start(operation, 1, world.now)
    stale = Operation.objects.select_related("proposal").get(id=operation.id)
    # A redelivered task past the timeout retries with the same key: attempt 2 is in flight.
    from dispatch.runtime import get_runtime
    from dispatch.services.attempts import attempt_next

    assert attempt_next(operation=operation, contract=get_runtime().contract("payments.transfer"),
                        now=world.now, lost_error="the worker was lost mid-attempt")
    _settle_attempt(stale, 1, Attempt.Outcome.FAILED_NO_EFFECT, None, "late", world.now)
    operation.refresh_from_db()
    assert (operation.state, operation.attempts_made) == ("claimed", 2)
    _settle_attempt(operation, 2, Attempt.Outcome.COMPLETED, {"key": operation.id}, "",
                    world.now)
    operation.refresh_from_db()
    assert operation.state == "completed"
