"""Nested ceilings (docs/design.md#budgets): a scope reserves tool calls, attempts and
concurrency out of its parent's remaining capacity when it opens; a child never spends more than
its parent has left, however deeply nested; what a closed scope did not use goes back, whether it
finished, failed or its holder was killed; the per-principal concurrency limit caps the actions
in flight. Cross-process on the real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from dispatch.models import BudgetCounter, Execution, Scope
from dispatch.services.ceilings import (
    Ceiling,
    scope_close,
    scope_enter,
    scope_leave,
    scope_open,
    scope_remaining,
    scope_take,
    scopes_sweep,
)
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.executions import execution_create
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.concurrency.test_delegation_races import wait_for_a_lock_waiter
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.paused import PausedChild
from tests.support.processes import ROOT, child_env


def _run(world: World) -> Execution:
    return execution_create(principal=world.owner, adapter="test", now=timezone.now())


def _root(execution: Execution, calls: int = 10, attempts: int = 10,
          concurrency: int = 4) -> Scope:
    return scope_open(execution=execution, name="run", ceiling=Ceiling(calls, attempts,
                                                                       concurrency),
                      now=timezone.now())


def _approved_in_run(world: World, execution: Execution) -> tuple[Any, Any]:
    proposal = world.propose_email(world.draft(), execution_id=execution.id)
    return proposal, world.grant(proposal)


@pytest.mark.django_db
def test_a_nested_scope_asking_for_more_than_its_parent_has_left_is_refused(
        world: World) -> None:
    execution = _run(world)
    root = _root(execution)
    child = scope_open(execution=execution, name="steps[1]", parent_id=root.id,
                       ceiling=Ceiling(6, 4, 2), now=timezone.now())
    # Deeper: the grandchild is bounded by the child's ceiling, not the root's.
    with pytest.raises(Denial) as refused:
        scope_open(execution=execution, name="steps[1].agent", parent_id=child.id,
                   ceiling=Ceiling(7, 1, 1), now=timezone.now())
    assert refused.value.code is DenialCode.BUDGET_EXHAUSTED
    assert refused.value.details == {"budget": "calls", "scope": "steps[1]",
                                     "scope_id": child.id, "asked": 7, "remaining": 6}
    # A sibling asking for more than the root has left after the child's reservation.
    with pytest.raises(Denial) as sibling:
        scope_open(execution=execution, name="steps[2]", parent_id=root.id,
                   ceiling=Ceiling(4, 7, 1), now=timezone.now())
    assert sibling.value.details["scope"] == "run"
    assert sibling.value.details["budget"] == "attempts"
    assert sibling.value.details["remaining"] == 6
    # A refusal reserves nothing: not even the ceilings that would have fitted.
    assert scope_remaining(root.id) == {"calls": 4, "attempts": 6, "concurrency": 2}
    assert scope_remaining(child.id) == {"calls": 6, "attempts": 4, "concurrency": 2}
    assert Scope.objects.count() == 2
    # Spending inside a scope stops at its own ceiling, naming it.
    scope_take(child.id, calls=6)
    with pytest.raises(Denial) as spent:
        scope_take(child.id, calls=1)
    assert spent.value.details == {"budget": "calls", "scope": "steps[1]", "scope_id": child.id}


@pytest.mark.django_db
def test_the_parents_remaining_capacity_is_exact_after_children_finish_or_fail(
        world: World) -> None:
    execution = _run(world)
    root = _root(execution)
    scope_take(root.id, calls=1)  # the root's own work
    finished = scope_open(execution=execution, name="a", parent_id=root.id,
                          ceiling=Ceiling(4, 3, 2), now=timezone.now())
    failed = scope_open(execution=execution, name="b", parent_id=root.id,
                        ceiling=Ceiling(3, 3, 1), now=timezone.now())
    nested = scope_open(execution=execution, name="b.inner", parent_id=failed.id,
                        ceiling=Ceiling(2, 2, 1), now=timezone.now())
    assert scope_remaining(root.id) == {"calls": 2, "attempts": 4, "concurrency": 1}
    scope_take(finished.id, calls=3, attempts=2)
    scope_take(nested.id, calls=1, attempts=1)
    scope_enter(finished.id)
    scope_leave(finished.id)
    assert scope_close(finished.id, now=timezone.now(), reason="finished") == {
        "calls": 1, "attempts": 1, "concurrency": 2}
    # The failed child closes its own child first; its unused part comes back through it.
    assert scope_close(failed.id, now=timezone.now(), reason="failed: schema_invalid") == {
        "calls": 2, "attempts": 2, "concurrency": 1}
    assert Scope.objects.get(id=nested.id).closed_at is not None
    # 10 - 1 (root) - 3 (a) - 1 (b.inner) calls; 10 - 2 - 1 attempts; every slot.
    assert scope_remaining(root.id) == {"calls": 5, "attempts": 7, "concurrency": 4}
    # A second close gives nothing back twice, and a closed scope spends nothing.
    assert scope_close(failed.id, now=timezone.now(), reason="again") is None
    assert scope_remaining(root.id) == {"calls": 5, "attempts": 7, "concurrency": 4}
    with pytest.raises(Denial):
        scope_take(finished.id, calls=1)


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.support.scopes", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env())


@pytest.mark.django_db(transaction=True)
def test_a_killed_holders_scope_gives_back_exactly_what_it_did_not_use(world: World) -> None:
    """The child process opens a scope of 5 calls, spends 2 calls and an attempt, holds its one
    concurrency slot for an attempt in flight, and is killed. The sweep (after the lease) closes
    it: the parent gets back 3 calls, 1 attempt and no slot; the slot comes back when the
    attempt in flight ends."""
    execution = _run(world)
    root = _root(execution)
    child = _child("hold", root.id, "5", "2")
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, child.stderr.read() if child.stderr else ""
    held = json.loads(line)["scope_id"]
    child.kill()
    child.wait(timeout=10)
    assert scope_remaining(root.id) == {"calls": 5, "attempts": 8, "concurrency": 3}
    assert scopes_sweep(now=timezone.now()) == 0  # the lease has not lapsed yet
    assert scopes_sweep(now=timezone.now() + timedelta(seconds=5)) == 1
    scope = Scope.objects.get(id=held)
    assert (scope.close_reason, scope.returned) == (
        "its holder's lease lapsed", {"calls": 3, "attempts": 1, "concurrency": 0})
    assert scope_remaining(root.id) == {"calls": 8, "attempts": 9, "concurrency": 3}
    scope_leave(held)  # the attempt in flight ended (its reconciliation settled it)
    assert scope_remaining(root.id) == {"calls": 8, "attempts": 9, "concurrency": 4}
    assert scopes_sweep(now=timezone.now() + timedelta(seconds=5)) == 0


@pytest.mark.django_db(transaction=True)
def test_eight_processes_opening_children_never_overdraw_the_parent(world: World) -> None:
    execution = _run(world)
    root = _root(execution, calls=10)
    children = [_child("open", root.id, "3") for _ in range(8)]
    answers: list[dict[str, Any]] = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    opened = [a for a in answers if "scope_id" in a]
    refused = [a for a in answers if "denied" in a]
    assert (len(opened), len(refused)) == (3, 5), answers
    assert {a["denied"] for a in refused} == {"budget_exhausted"}
    assert {a["details"]["scope"] for a in refused} == {"run"}
    assert scope_remaining(root.id)["calls"] == 1
    assert BudgetCounter.objects.get(key=f"scope:{root.id}:calls").used == 9


def _second_refused(world: World, first: Any, second: Any) -> tuple[Any, Any]:
    """Claim `first`, then `second` while `first` is in flight: the running operation and the
    details of the second claim's `budget_exhausted`."""
    running = proposal_dispatch(principal=world.owner, proposal_id=first.id,
                                now=timezone.now(), enqueue=False)
    with pytest.raises(Denial) as refused:
        proposal_dispatch(principal=world.owner, proposal_id=second.id, now=timezone.now(),
                          enqueue=False)
    assert refused.value.code is DenialCode.BUDGET_EXHAUSTED
    return running, refused.value.details


@pytest.mark.django_db
def test_the_per_principal_concurrency_limit_caps_actions_in_flight(
        live: World, destinations: Destinations, settings: Any) -> None:
    settings.CONCURRENT_OPERATIONS_PER_PRINCIPAL = 1
    first, _ = live.approved_email()
    second, second_permit = live.approved_email()
    running, refused = _second_refused(live, first, second)
    assert refused == {"budget": "concurrency", "scope": "principal", "limit": 1, "in_flight": 1}
    second_permit.refresh_from_db()
    assert second_permit.state == "issued"  # the refused claim rolled back whole
    assert operation_execute(operation_id=running.id).state == "completed"
    # The slot is the store's count of claimed operations: the settled one freed it.
    later = proposal_dispatch(principal=live.owner, proposal_id=second.id, now=timezone.now(),
                              enqueue=False)
    assert later.state == "claimed"


@pytest.mark.django_db
def test_a_workflow_run_spends_out_of_its_own_scope(
        live: World, destinations: Destinations) -> None:
    """A run opens its root scope with the ceilings it was given: a dispatch past them is
    refused naming the run's scope, before any claim; the sweep closes the scope of a run that
    ended."""
    from dispatch.models import Operation, Proposal
    from dispatch.workflows.resume import wake
    from tests.workflows.test_run_deadlines import start

    run = start(live, deadline_s=None, email_revision=live.draft().id,
                ceiling=Ceiling(calls=0, attempts=5, concurrency=1))
    root = Scope.objects.get(execution_id=run.execution_id)
    assert (root.name, root.parent_id, root.calls) == ("run", None, 0)
    proposal = Proposal.objects.get(execution_id=run.execution_id)
    live.grant(proposal)
    (resumed,) = wake(approval_id=proposal.approval.id, now=timezone.now())
    assert resumed.state == "denied"
    assert resumed.denial is not None
    assert (resumed.denial.step, resumed.denial.code) == ("dispatch", "budget_exhausted")
    assert resumed.denial.detail == {"budget": "calls", "scope": "run", "scope_id": root.id}
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert scopes_sweep(now=timezone.now()) == 1  # the run ended: its scope closes
    assert Scope.objects.get(id=root.id).close_reason == "its run ended"


def _three_of_eight_claim(world: World, proposals: list[Any], **env: str) -> None:
    """Eight processes each dispatch one of `proposals` at once: exactly three claims win and
    the other five hear `budget_exhausted`."""
    children = [subprocess.Popen(
        [sys.executable, "-m", "tests.support.child", "dispatch", world.owner.id, proposal.id],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(**env)) for proposal in proposals]
    answers = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    won = [a for a in answers if "operation_id" in a]
    assert len(won) == 3, answers
    assert [a for a in answers if "operation_id" not in a] == [{"denied": "budget_exhausted"}] * 5


@pytest.mark.django_db(transaction=True)
def test_eight_processes_claiming_never_pass_the_concurrency_limit(world: World) -> None:
    """Eight processes each claim another approved action of one principal at once, with the
    limit at 3: exactly three claims win, the others hear `budget_exhausted` and their permits
    stay issued."""
    from dispatch.models import Operation, Permit

    pairs = [world.approved_email() for _ in range(8)]
    _three_of_eight_claim(world, [p for p, _ in pairs], CONCURRENT_OPERATIONS_PER_PRINCIPAL="3")
    assert Operation.objects.filter(principal=world.owner, state="claimed").count() == 3
    assert Permit.objects.filter(state="issued").count() == 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limit", ["principal", "run"])
def test_a_claim_counts_only_after_the_claim_before_it_committed(
        world: World, tmp_path: Path, limit: str) -> None:
    """Forced interleaving (limit 1, the principal's or a run scope's): the first claim stops
    after its count, before its commit; the second, in another process, waits for the first
    one's lock instead of counting past it, and is refused once the first commits. (On
    PostgreSQL the lock is, for the principal, its budget rows: its hourly counter, and its
    `claims:` row, which holds across an hour's boundary where the hourly key changes; for a
    run, its scope's `attempts` counter; on SQLite the database's write lock.)"""
    if limit == "principal":
        first, _ = world.approved_email()
        second, second_permit = world.approved_email()
        env = {"CONCURRENT_OPERATIONS_PER_PRINCIPAL": "1"}
    else:
        execution = _run(world)
        _root(execution, concurrency=1)
        first, _ = _approved_in_run(world, execution)
        second, second_permit = _approved_in_run(world, execution)
        env = {}
    with PausedChild(tmp_path, "dispatch", world.owner.id, first.id,
                     pause="claim.before_commit", **env) as holder:
        holder.reached()
        waiter = subprocess.Popen(
            [sys.executable, "-m", "tests.support.child", "dispatch", world.owner.id,
             second.id], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(**env))
        try:
            if connection.vendor == "postgresql":
                wait_for_a_lock_waiter()
            else:
                time.sleep(2.0)  # it waits for BEGIN IMMEDIATE (its busy timeout is longer)
            assert waiter.poll() is None  # blocked behind the first claim, not answered
            assert "operation_id" in holder.result()
            out, err = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                waiter.kill()
    assert waiter.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"denied": "budget_exhausted"}
    second_permit.refresh_from_db()
    assert second_permit.state == "issued"



@pytest.mark.django_db
def test_a_runs_concurrency_ceiling_caps_its_actions_in_flight(
        live: World, destinations: Destinations) -> None:
    """The run's innermost open scope caps the run's actions claimed and not settled: one past
    its concurrency ceiling is refused naming the scope, the refused claim spends nothing, and
    the slot is free again once the action in flight settles."""
    execution = _run(live)
    root = _root(execution, concurrency=1)
    first, _ = _approved_in_run(live, execution)
    second, second_permit = _approved_in_run(live, execution)
    running, refused = _second_refused(live, first, second)
    assert refused == {"budget": "concurrency", "scope": "run", "scope_id": root.id, "limit": 1,
                       "in_flight": 1}
    second_permit.refresh_from_db()
    assert second_permit.state == "issued"  # the refused claim rolled back whole
    assert scope_remaining(root.id)["attempts"] == 9  # and spent nothing of the scope
    assert operation_execute(operation_id=running.id).state == "completed"
    later = proposal_dispatch(principal=live.owner, proposal_id=second.id, now=timezone.now(),
                              enqueue=False)
    assert later.state == "claimed"
    assert scope_remaining(root.id)["attempts"] == 8


@pytest.mark.django_db(transaction=True)
def test_eight_processes_claiming_actions_of_one_run_never_pass_its_concurrency(
        world: World) -> None:
    """Eight processes each claim another approved action of one run at once, its scope's
    concurrency at 3: exactly three claims win; the others hear `budget_exhausted` and their
    permits stay issued."""
    from dispatch.models import Operation, Permit

    execution = _run(world)
    root = _root(execution, calls=20, attempts=20, concurrency=3)
    pairs = [_approved_in_run(world, execution) for _ in range(8)]
    _three_of_eight_claim(world, [p for p, _ in pairs])
    assert Operation.objects.filter(execution_id=execution.id, state="claimed").count() == 3
    assert Permit.objects.filter(state="issued").count() == 5
    assert scope_remaining(root.id)["attempts"] == 17
