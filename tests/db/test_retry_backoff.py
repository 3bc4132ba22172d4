"""Retries under the same key back off (docs/design.md#outcomes): exponential with full jitter
from the contract's base delay, capped, never sooner than the destination's `Retry-After`, within
the contract's attempts. A destination down for two seconds that says when to come back gets
its payment made once, `completed`, with no admin and no second operator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dispatch.models import Attempt, Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import backoff, operation_execute
from tests.conftest import World
from tests.support.standins import bank_destination

pytestmark = pytest.mark.django_db


@pytest.fixture
def bank(settings: Any) -> Iterator[Any]:
    with bank_destination(settings) as server:
        yield server


def _paid(world: World) -> Operation:
    proposal = world.propose_transfer("25.00")
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    operation_execute(operation_id=operation.id)
    operation.refresh_from_db()
    return operation


def test_an_outage_of_two_seconds_with_retry_after_ends_completed(world: World, bank: Any) -> None:
    bank.outage, bank.retry_after = 2.0, 1
    operation = _paid(world)
    assert operation.state == "completed", operation.evidence
    attempts = list(Attempt.objects.filter(operation_id=operation.id).order_by("number"))
    assert [a.outcome for a in attempts] == ["uncertain", "uncertain", "completed"]
    assert len(set(bank.keys)) == 1 and len(bank.keys) == 3  # one key, three requests
    gaps = [b - a for a, b in zip(bank.arrived, bank.arrived[1:], strict=False)]
    assert all(gap >= 1.0 for gap in gaps), gaps  # never sooner than the bank asked
    assert not operation.uncertain or operation.state == "completed"


def test_without_retry_after_an_outage_past_the_attempts_stays_unknown(
        world: World, bank: Any, settings: Any) -> None:
    settings.RETRY_BACKOFF_SECONDS = 0.2
    bank.outage = 60.0
    operation = _paid(world)
    assert operation.state == "unknown"  # three attempts, all uncertain: nothing more
    assert len(bank.keys) == 3
    gaps = [b - a for a, b in zip(bank.arrived, bank.arrived[1:], strict=False)]
    # Full jitter: each wait within [0, base * 2^(n-1)], capped; never more.
    assert gaps[0] < 0.2 + 0.5 and gaps[1] < 0.4 + 0.5, gaps


def test_the_backoff_takes_the_contracts_base_and_cap_and_the_deployments_otherwise(
        settings: Any) -> None:
    settings.RETRY_BACKOFF_SECONDS, settings.RETRY_BACKOFF_MAX_SECONDS = 0.5, 4.0
    transfer = get_runtime().contract("payments.transfer")
    drawn = [backoff(transfer, number, None) for number in (1, 2, 3, 8) for _ in range(50)]
    waits = [w for w in drawn if w is not None]
    assert len(waits) == len(drawn) and all(0 <= w < 4.0 for w in waits)
    assert max(waits[:50]) < 0.5 and max(waits[50:100]) < 1.0
    assert max(waits[150:]) > 0.5  # the eighth is capped at 4, not 0.5 * 2**7 = 64
    asked = backoff(transfer, 1, 3.0)
    assert asked is not None and asked >= 3.0
    assert backoff(transfer, 1, 3600.0) is None  # past the cap: no retry sooner than asked


def test_a_destination_asking_past_the_cap_is_not_retried_sooner(
        world: World, bank: Any, settings: Any) -> None:
    settings.RETRY_BACKOFF_MAX_SECONDS = 1.0
    bank.outage, bank.retry_after = 60.0, 120
    operation = _paid(world)
    assert operation.state == "unknown"
    assert len(bank.keys) == 1  # one attempt: the bank asked for two minutes
    last = Attempt.objects.get(operation_id=operation.id)
    assert "asked to wait 120s" in last.error

