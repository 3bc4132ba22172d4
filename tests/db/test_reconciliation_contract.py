"""Reconciliation is part of the contract (docs/design.md#reconciliation): what a lookup's answer
may settle is what the contract declares (`none`, `presence`, `presence_and_absence`), not what the
handler happens to answer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from demo import contracts as demo_contracts
from demo.handlers import EmailSendHandler
from dispatch.handlers import LookupResult
from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_start
from dispatch.services.reconciliation import reconcile_operations
from protocols.contracts import Reconciliation
from tests.conftest import World
from tests.support.claims import LATER

pytestmark = pytest.mark.django_db

def lost(world: World, proposal: Any) -> Operation:
    """Attempt 1 started and its worker lost: one pass later the operation is unknown."""
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    assert attempt_start(operation, 1, world.now)
    return operation


def unknown_after_a_pass(world: World, operation: Operation) -> dict[str, Any]:
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    operation.refresh_from_db()
    return counts


def test_the_demo_contracts_declare_what_their_lookups_prove() -> None:
    runtime = get_runtime()
    assert {c.qualified_name: c.reconciliation.value for c in runtime.registry} == {
        "crm.lookup": "none", "email.send": "presence",
        "payments.transfer": "presence_and_absence",
        # docs/design.md#evidence: reads settle nothing; the publisher deduplicates and answers both
        # ways.
        "research.fetch": "none", "evidence.attest": "none",
        "report.publish": "presence_and_absence"}


def test_under_presence_an_absence_settles_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(EmailSendHandler, "lookup", lambda self, op, snap: LookupResult(
        "absent", "the sink has no such message"))
    operation = lost(world, world.propose_email(world.draft()))
    unknown_after_a_pass(world, operation)
    assert operation.state == "unknown"
    counts = unknown_after_a_pass(world, operation)
    assert (counts["retried"], counts["inconclusive"]) == (0, 1)
    assert operation.state == "unknown"
    assert operation.attempts_made == 1
    assert "reconciliation presence: an absence is no proof" in operation.evidence


def test_under_presence_a_presence_settles(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EmailSendHandler, "lookup", lambda self, op, snap: LookupResult(
        "present", "the sink holds it"))
    operation = lost(world, world.propose_email(world.draft()))
    unknown_after_a_pass(world, operation)
    unknown_after_a_pass(world, operation)
    assert operation.state == "reconciled_completed"


@pytest.fixture
def transfers_without_reconciliation(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """`payments.transfer` declared `reconciliation: none`; yields the lookups made."""
    made: list[str] = []
    original = demo_contracts.CONTRACTS["payments.transfer"]
    monkeypatch.setitem(demo_contracts.CONTRACTS, "payments.transfer", lambda fp: replace(
        original(fp), reconciliation=Reconciliation.NONE))
    monkeypatch.setattr("demo.handlers.bank_lookup",
                        lambda base_url, key, timeout: made.append(key))
    get_runtime.cache_clear()
    yield made
    get_runtime.cache_clear()


def test_under_none_no_lookup_is_made(
    world: World, transfers_without_reconciliation: list[str],
) -> None:
    operation = lost(world, world.propose_transfer())
    unknown_after_a_pass(world, operation)
    assert operation.state == "unknown"
    counts = unknown_after_a_pass(world, operation)
    assert counts["inconclusive"] == 1
    assert operation.state == "unknown"
    assert transfers_without_reconciliation == []
    assert "declares reconciliation none" in operation.evidence


def test_under_presence_and_absence_an_absence_allows_a_retry_with_the_same_key(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    operation = lost(world, world.propose_transfer())
    counts = unknown_after_a_pass(world, operation)  # a stale claim, then its lookup
    assert (counts["unknown"], counts["retried"]) == (1, 1)
    assert (operation.state, operation.attempts_made) == ("claimed", 1)  # same id: same key


def test_an_operation_moved_during_its_lookup_leaves_the_rest_of_the_pass_alone(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An admin resolves one unknown while the pass asks its destination: the pass counts it
    inconclusive and goes on to the next, instead of stopping at a denial."""
    from dispatch.services import reconciliation
    from dispatch.services.reconciliation import operation_reconcile, operation_resolve

    first = lost(world, world.propose_transfer())
    second = lost(world, world.propose_transfer(amount="11.00"))
    for operation in (first, second):  # both become unknown (stale), lookups inconclusive
        monkeypatch.setattr(reconciliation, "lookup_bounded",
                            lambda handler, op_id, snapshot: LookupResult("unknown", "down"))
        operation_reconcile(operation_id=operation.id, now=world.now + LATER, enqueue=False)
        operation_reconcile(operation_id=operation.id, now=world.now + LATER, enqueue=False)
        operation.refresh_from_db()
        assert operation.state == "unknown"

    def resolving_lookup(handler: Any, op_id: str, snapshot: Any) -> LookupResult:
        if op_id == first.id:
            operation_resolve(admin=world.admin, operation_id=first.id, outcome="completed",
                              evidence="I checked the bank", now=world.now + LATER)
        return LookupResult("present", "the bank holds it")

    monkeypatch.setattr(reconciliation, "lookup_bounded", resolving_lookup)
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert (counts["reconciled"], counts["inconclusive"]) == (1, 1)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == second.state == "reconciled_completed"


def test_one_operation_its_records_refuse_to_move_does_not_stop_the_pass(world: World) -> None:
    from dispatch.models import Resource

    stuck = lost(world, world.propose_email(world.draft()))
    # A store whose draft is no longer `dispatching` (written past the services): the
    # operation's move to unknown is refused by the draft's table.
    Resource.objects.filter(id=stuck.proposal.resource_refs[0]["id"]).update(state="draft")
    other = lost(world, world.propose_email(world.draft(subject="Another")))

    counts = reconcile_operations(now=world.now + LATER, enqueue=False)

    assert (counts["stuck"], counts["unknown"]) == (1, 1)
    assert Operation.objects.get(id=stuck.id).state == "claimed"
    assert Operation.objects.get(id=other.id).state == "unknown"
