"""A stale attempt never settles its operation (docs/design.md#dispatcher): two worker processes,
forced into the interleaving that used to lose a payment's outcome.

Attempt 1 finds the bank down (a definite failure) and stops before recording it. The bank comes
up; reconciliation makes the stale claim unknown, finds no transfer and retries; attempt 2
transfers and stops before recording that. Then attempt 1 answers "failed, no effect", then
attempt 2 answers "completed". The operation must end completed (never failed_no_effect, which
would let an agent propose again under a new id, a new bank key: a second payment), and the bank
holds one transfer.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import reconcile_operations
from tests.conftest import make_world
from tests.support.destinations import free_port, running_destinations
from tests.support.paused import PausedChild

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_late_definite_failure_of_attempt_1_never_settles_attempt_2(
    tmp_path: Path, settings: Any,
) -> None:
    smtp_port, bank_port = free_port(), free_port()  # nothing listens on them yet
    settings.DESTINATIONS = {"dir": str(tmp_path / "destinations"), "smtp_host": "127.0.0.1",
                             "smtp_port": smtp_port, "bank_url": f"http://127.0.0.1:{bank_port}"}
    world = make_world(timezone.now())
    proposal = world.propose_transfer(amount="25.00")
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)

    with PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_outcome") as first:
        first.reached()  # attempt 1: connection refused, "failed_no_effect" not yet recorded
        with running_destinations(tmp_path / "destinations", smtp_port=smtp_port,
                                  bank_port=bank_port) as destinations:
            counts = reconcile_operations(now=timezone.now() + timedelta(seconds=16),
                                          enqueue=False)
            assert (counts["unknown"], counts["retried"]) == (1, 1)
            with PausedChild(tmp_path, "execute", operation.id,
                             pause="attempt.before_outcome") as second:
                second.reached()  # attempt 2: the bank made the transfer
                assert len(list_all(destinations.directory)["bank"]) == 1
                assert first.result() == {"state": "claimed"}  # its answer settled nothing
                assert second.result() == {"state": "completed"}
            transfers = list_all(destinations.directory)["bank"]

    operation.refresh_from_db()
    assert operation.state == "completed"
    assert [t["key"] for t in transfers] == [operation.id]
    assert list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome")) == [(1, "uncertain"), (2, "completed")]
    ignored = AuditEvent.objects.get(kind="attempt.ignored", operation_id=operation.id)
    assert (ignored.details["attempt"], ignored.details["outcome"]) == (1, "failed_no_effect")
    assert not AuditEvent.objects.filter(kind="operation.failed_no_effect").exists()
    assert Operation.objects.count() == 1
