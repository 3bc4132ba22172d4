"""Budgets: exhausted budgets refuse and reserve nothing; the worker's claim."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    BudgetCounter,
    Decision,
    Operation,
    Permit,
)
from dispatch.services.budgets import budget_take
from dispatch.services.runs import proposal_run_approved
from protocols.denials import DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    budget_used,
    decide,
    dispatch,
    propose_lookup,
    state_of,
    store,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


def test_execution_budget_exhausted_is_refused_and_reserves_nothing(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    first = propose_lookup(world, execution_id="exe-budget")
    second = propose_lookup(world, execution_id="exe-budget")
    dispatch(world, first)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.status == 429
    assert denial.details == {"budget": "execution"}
    assert store() == before
    assert budget_used() == used
    assert used[f"execution:{world.owner.id}:exe-budget"] == 1


def test_budget_exhausted_leaves_the_permit_issued(world: World, settings: Any) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    first = world.propose_email(world.draft(), execution_id="exe-mail")
    world.grant(first)
    second_draft = world.draft(to=["second@example.com"])
    second = world.propose_email(second_draft, execution_id="exe-mail")
    permit = world.grant(second)
    dispatch(world, first)
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(second_draft) == "authorized"


def test_principal_budget_exhausted_rolls_back_every_key(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL = 1
    dispatch(world, propose_lookup(world, execution_id="exe-one"))
    second = propose_lookup(world, execution_id="exe-two")
    used = budget_used()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.details == {"budget": "principal"}
    after = budget_used()
    assert after.get(f"execution:{world.owner.id}:exe-two", 0) == 0
    assert {k: v for k, v in after.items() if v} == used


@pytest.mark.django_db(transaction=True)
def test_budget_is_taken_only_inside_a_transaction() -> None:
    with pytest.raises(RuntimeError, match="inside the claim's transaction"):
        budget_take(limits=[("execution:x:y", 5)], cost=1)
    assert not BudgetCounter.objects.exists()


def test_budget_cost_over_a_whole_counter_is_refused_before_any_write(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 0
    proposal = propose_lookup(world, execution_id="exe-zero")
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.details == {"budget": "execution"}
    assert store() == before
    assert not BudgetCounter.objects.exists()


def test_claim_refused_on_the_worker_leaves_the_grant_standing(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    """`dispatch_on_approval`: the grant commits the decision and the permit and hands the
    claim to a worker. A claim the worker is refused (the execution's budget is spent) leaves
    the decision, the issued permit and the authorized draft, takes no budget, starts no
    attempt and runs nothing."""
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    dispatch(world, propose_lookup(world, execution_id="exe-grant"))
    used = budget_used()
    draft = world.draft()
    proposal = world.propose_email(draft, execution_id="exe-grant", dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval, permit = decide(world, proposal)
    assert len(callbacks) == 1  # the worker's claim-and-run task
    assert proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id) is None
    assert approval.state == "granted"
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    assert not Attempt.objects.filter(operation__proposal=proposal).exists()
    assert budget_used() == used
    kinds = list(AuditEvent.objects.filter(proposal_id=proposal.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds[-2:] == ["approval.granted", "dispatch.denied"]
    # The agent hears why when it dispatches itself.
    assert refused(dispatch, world=world, proposal=proposal).code is DenialCode.BUDGET_EXHAUSTED


def test_database_error_in_the_workers_claim_rolls_back_claim_and_attempt(
    world: World, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any,
) -> None:
    from django.db import OperationalError

    import dispatch.services.claims

    def broken(**_: Any) -> None:
        raise OperationalError("lost the connection mid-claim")

    monkeypatch.setattr(dispatch.services.claims, "budget_take", broken)
    draft = world.draft()
    proposal = world.propose_email(draft, dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval, permit = decide(world, proposal)
    assert len(callbacks) == 1
    with pytest.raises(OperationalError):  # the task fails; its message comes back
        proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id)
    assert ApprovalRequest.objects.get(id=approval.id).state == "granted"
    assert Decision.objects.filter(approval_id=approval.id).count() == 1
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    assert not Attempt.objects.exists()
    assert not BudgetCounter.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_budget_take_counts_a_repeated_key_once_and_nothing_for_no_keys() -> None:
    from django.db import transaction

    with transaction.atomic():
        budget_take(limits=[("execution:x:y", 5), ("execution:x:y", 5)], cost=2)
        budget_take(limits=[], cost=1)
    assert budget_used() == {"execution:x:y": 2}
    with pytest.raises(ValueError, match="never negative"), transaction.atomic():
        budget_take(limits=[("execution:x:y", 5)], cost=-1)
    assert budget_used() == {"execution:x:y": 2}


def test_old_sqlite_is_refused_by_a_system_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import dispatch.apps

    monkeypatch.setattr(dispatch.apps, "settings", SimpleNamespace(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3"}}))
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version", "3.34.1")
    errors = dispatch.apps.check_sqlite_version()
    assert [e.id for e in errors] == ["dispatch.E001"]
    assert "3.34.1" in errors[0].msg
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version_info", (3, 35, 0))
    assert dispatch.apps.check_sqlite_version() == []


def test_worker_claims_and_starts_attempt_one_in_one_transaction(
    world: World, django_capture_on_commit_callbacks: Any,
) -> None:
    """docs/design.md#write-transactions: the grant commits the decision and the permit; the
    worker's claim and attempt 1 commit together, so the action costs two commits where the
    handler runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    draft = world.draft()
    proposal = world.propose_email(draft, dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        _, permit = decide(world, proposal)
    assert len(callbacks) == 1  # handed over only once the grant commits
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    with CaptureQueriesContext(connection) as seen:
        operation = proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id)
    assert operation is not None and operation.id == permit.operation_id
    assert Permit.objects.get(id=permit.id).state == "claimed"
    assert Attempt.objects.filter(operation_id=operation.id, number=1).exists()
    kinds = list(AuditEvent.objects.filter(operation_id=operation.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds[:2] == ["permit.claimed", "attempt.started"]
    # Inside the test's transaction every atomic block is a savepoint: the claim with its
    # attempt is one, the outcome another (the refused-dispatch audit would be a third).
    savepoints = [q["sql"] for q in seen.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 2, savepoints


def test_failed_claim_holds_no_budget(world: World) -> None:
    """Two proposals on one revision: the second claim fails at the resource compare-and-swap,
    and its budget, taken in the same transaction, rolls back with it."""
    draft = world.draft()
    first = world.propose_email(draft)
    second = world.propose_email(draft)
    world.grant(first)
    second_permit = world.grant(second)
    assert state_of(draft) == "authorized"
    dispatch(world, first)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details["state"] == "dispatching"
    assert store() == before
    after = budget_used()
    assert after.get(f"execution:{world.owner.id}:{second.execution_id}", 0) == 0
    assert {k: v for k, v in after.items() if v} == used
    assert Permit.objects.get(id=second_permit.id).state == "issued"
    assert Operation.objects.filter(proposal=second).count() == 0
