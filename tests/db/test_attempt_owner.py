"""Every attempt after the first is started by `attempt_next` (docs/design.md#retries, #budgets): it
draws from the budgets like the claim does, a run that runs out mid-retry stops naming the scope and
nothing is charged twice; an authoritative absence proven once nothing can still arrive lets a
destination that does not deduplicate be tried exactly once more, under the same key."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from demo import contracts as demo_contracts
from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, BudgetCounter, Operation
from dispatch.runtime import get_runtime
from dispatch.services.attempts import attempt_next
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_hold, attempt_start
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.worker import operation_execute
from protocols.contracts import Idempotency, Reconciliation
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def counters() -> dict[str, int]:
    return dict(BudgetCounter.objects.values_list("key", "used"))


def execution_used(world: World, execution_id: str) -> int:
    return counters().get(f"execution:{world.owner.id}:{execution_id}", 0)


def test_each_retry_draws_from_the_budgets(live: World, destinations: Destinations) -> None:
    proposal = live.propose_transfer(memo="lose-response.test", execution_id="exe-retries")
    live.grant(proposal)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)
    # Three attempts, every response lost: each attempt took one unit, none twice.
    assert operation.state == "unknown"
    assert Attempt.objects.filter(operation=operation).count() == 3
    assert execution_used(live, "exe-retries") == 3
    hour = f"principal:{live.owner.id}:{timezone.now():%Y%m%d%H}"
    assert counters()[hour] >= 3
    starts = AuditEvent.objects.filter(kind="attempt.started", operation_id=operation.id)
    assert sorted(e.details.get("authorized_by", "claim") for e in starts) == [
        "claim", "retry", "retry"]


def test_a_run_that_runs_out_mid_retry_stops_naming_the_scope(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 2
    proposal = live.propose_transfer(memo="lose-response.test", execution_id="exe-short")
    live.grant(proposal)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)

    assert operation.state == "unknown"  # attempts 1 and 2 were uncertain: never no effect
    assert list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome")) == [(1, "uncertain"), (2, "uncertain")]
    refused = AuditEvent.objects.get(kind="operation.unknown", operation_id=operation.id)
    assert refused.details["code"] == "budget_exhausted"
    assert refused.details["budget"] == "execution"
    assert refused.details["refused_attempt"] == 3
    assert "budget_exhausted: the execution budget is spent" in operation.evidence
    assert execution_used(live, "exe-short") == 2  # the refused attempt reserved nothing
    assert len(list_all(destinations.directory)["bank"]) == 1


@pytest.fixture
def transfers_without_dedup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`payments.transfer` as a destination that does not deduplicate, whose lookups are
    authoritative both ways, and whose lookup finds nothing."""
    original = demo_contracts.CONTRACTS["payments.transfer"]
    monkeypatch.setitem(demo_contracts.CONTRACTS, "payments.transfer", lambda fp: replace(
        original(fp), idempotency_contract=Idempotency.NONE,
        reconciliation=Reconciliation.PRESENCE_AND_ABSENCE))
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    get_runtime.cache_clear()
    yield
    get_runtime.cache_clear()


def test_a_proven_absence_retries_a_destination_without_dedup_exactly_once(
    live: World, destinations: Destinations, transfers_without_dedup: None,
) -> None:
    proposal = live.propose_transfer(memo="fail-before.test")
    live.grant(proposal)
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                                  enqueue=False)
    # Attempt 1: the worker died inside it (an open attempt); nothing reached the bank.
    assert attempt_start(operation, 1, timezone.now())
    started = Attempt.objects.get(operation=operation).started_at

    # Past its timeout, within the fence: the absence proves nothing yet, no retry.
    counts = reconcile_operations(now=started + timedelta(seconds=16), enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 0)
    operation.refresh_from_db()
    assert (operation.state, operation.uncertain) == ("unknown", True)
    assert "may still be delivered" in operation.evidence

    # Past the fence: proven absent; one more attempt under the same key, no longer uncertain.
    counts = reconcile_operations(now=started + timedelta(seconds=50), enqueue=False)
    assert counts["retried"] == 1
    operation.refresh_from_db()
    assert (operation.state, operation.uncertain) == ("claimed", False)
    retried = AuditEvent.objects.get(kind="operation.retried", operation_id=operation.id)
    assert retried.details["absence_proven"] is True

    # Attempt 2 meets a definite refusal: no effect is now the truth, and nothing retries it.
    operation = operation_execute(operation_id=operation.id)
    assert operation.state == "failed_no_effect"
    assert list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome")) == [(1, "uncertain"), (2, "failed_no_effect")]
    assert list_all(destinations.directory)["bank"] == []


def test_without_a_proven_absence_a_destination_without_dedup_is_never_retried(
    live: World, destinations: Destinations, transfers_without_dedup: None,
) -> None:
    proposal = live.propose_transfer(memo="lose-response-once.test")
    live.grant(proposal)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)
    assert operation.state == "unknown"
    assert Attempt.objects.filter(operation=operation).count() == 1
    counts = reconcile_operations(now=timezone.now() + timedelta(seconds=16), enqueue=False)
    assert counts["retried"] == 0
    assert Operation.objects.get(id=operation.id).state == "unknown"


def test_a_second_start_of_the_same_attempt_starts_nothing_and_charges_nothing(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(memo="lose-response.test", execution_id="exe-twice")
    live.grant(proposal)
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                                  enqueue=False)
    assert attempt_start(operation, 1, timezone.now())
    assert attempt_hold(operation, 1, "response lost", timezone.now(),
                        retry_at=timezone.now())
    contract = get_runtime().contract("payments.transfer")
    stale = Operation.objects.select_related("proposal", "principal", "permit").get(
        id=operation.id)  # a duplicate task, loaded before either started attempt 2
    assert attempt_next(operation=operation, contract=contract, now=timezone.now())
    used = execution_used(live, "exe-twice")
    assert attempt_next(operation=stale, contract=contract, now=timezone.now()) is None
    assert execution_used(live, "exe-twice") == used == 2
    assert Attempt.objects.filter(operation_id=operation.id).count() == 2
    assert Operation.objects.get(id=operation.id).state == "claimed"  # the first one's
