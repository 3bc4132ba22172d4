"""The worker-claim path across OS processes on the real database
(docs/design.md#write-transactions-per-action): a `dispatch_on_approval` grant commits the
decision and the permit and hands the proposal to a worker, whose claim and attempt 1 are one
transaction.

Every worker here is a separate OS process with its own connection (SQLite file or PostgreSQL,
as `DATABASE_URL` says); failpoints (dispatch/failpoints.py) force the interleavings.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

import dispatch.services.reconciliation
from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, Operation, Permit, Resource
from dispatch.services.authority import grant_revoke
from dispatch.services.reconciliation import reconcile_operations
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.worker_claim import start_workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKERS = 24
LATER = timedelta(seconds=40)  # past the demo contracts' 15 s timeout and the unclaimed grace


def approved(world: World, *, transfer: bool = False) -> tuple[Any, Any]:
    """A `dispatch_on_approval` proposal, granted: the decision and the permit committed, the
    worker's task not delivered (a test delivers it to its own worker processes)."""
    proposal = (world.propose_transfer(amount="9", dispatch_on_approval=True) if transfer
                else world.propose_email(world.draft(), dispatch_on_approval=True))
    permit = world.grant(proposal)
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    return proposal, permit


def collect(procs: list[Any], results: Any) -> list[tuple[str, str]]:
    found = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return found


def wait_reached(folder: Path, point: str) -> None:
    deadline = time.monotonic() + 60
    while not (folder / f"{point}.reached").exists():
        assert time.monotonic() < deadline, f"no worker reached {point}"
        time.sleep(0.01)


def denial_codes(proposal_id: str) -> Counter[str]:
    return Counter(AuditEvent.objects.filter(proposal_id=proposal_id, kind="dispatch.denied")
                   .values_list("details__code", flat=True))


def test_many_workers_given_one_approved_proposal_make_one_claim_and_one_effect(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    proposal, permit = approved(live)
    # The first to claim holds its claim, attempt 1 written, uncommitted, until every other
    # worker has had time to run into it (the permit's row lock on PostgreSQL, the write lock
    # on SQLite).
    procs, results = start_workers(proposal.id, live.owner.id, WORKERS,
                                   DISPATCH_PAUSE_AT="claim.before_commit",
                                   DISPATCH_PAUSE_DIR=str(tmp_path), DISPATCH_PAUSE_TIMEOUT="1")
    outcomes = collect(procs, results)

    assert (tmp_path / "claim.before_commit.reached").exists()  # the winner held its claim
    assert Counter(kind for kind, _ in outcomes) == {"ran": 1, "refused": WORKERS - 1}, outcomes
    assert [state for kind, state in outcomes if kind == "ran"] == ["completed"]
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert operation.id == permit.operation_id and operation.state == "completed"
    assert list(Attempt.objects.filter(operation=operation).values_list("number", "outcome")) \
        == [(1, "completed")]
    assert Permit.objects.get(id=permit.id).state == "claimed"
    assert AuditEvent.objects.filter(kind="permit.claimed", proposal_id=proposal.id).count() == 1
    assert AuditEvent.objects.filter(kind="attempt.started", proposal_id=proposal.id).count() == 1
    assert denial_codes(proposal.id) == {"permit_claimed": WORKERS - 1}
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_worker_killed_after_the_combined_commit_leaves_an_open_attempt_reconciliation_settles(
    live: World, destinations: Destinations,
) -> None:
    proposal, permit = approved(live, transfer=True)
    procs, results = start_workers(proposal.id, live.owner.id, 1, barrier=False,
                                   DISPATCH_CRASH_AT="claim.after_commit")
    procs[0].join(timeout=120)
    assert procs[0].exitcode == -signal.SIGKILL

    # Claim and attempt 1 committed together: the operation is claimed, its attempt open,
    # nothing was sent.
    operation = Operation.objects.get(proposal_id=proposal.id)
    assert (operation.state, operation.attempts_made) == ("claimed", 1)
    assert list(Attempt.objects.filter(operation=operation).values_list(
        "number", "ended_at")) == [(1, None)]
    assert Permit.objects.get(id=permit.id).state == "claimed"
    assert list_all(destinations.directory)["bank"] == []
    # The redelivered task loses the claim and starts nothing.
    procs, results = start_workers(proposal.id, live.owner.id, 1, barrier=False)
    assert collect(procs, results) == [("refused", "")]
    assert Attempt.objects.filter(operation=operation).count() == 1

    # Reconciliation treats it like any open attempt: past the timeout it is uncertain, the
    # bank has no transfer under the key, so a same-key retry settles it.
    counts = reconcile_operations(now=timezone.now() + LATER, enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 1)
    done = operation_execute(operation_id=operation.id)
    assert done.state == "completed"
    assert list(done.attempts.order_by("number").values_list("number", "outcome")) == [
        (1, "uncertain"), (2, "completed")]
    assert [t["key"] for t in list_all(destinations.directory)["bank"]] == [operation.id]


def test_a_task_lost_before_the_claim_is_requeued_and_runs_once(
    live: World, destinations: Destinations, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal, permit = approved(live)
    # The worker that took the task dies before its claim: nothing is written.
    procs, results = start_workers(proposal.id, live.owner.id, 1, barrier=False,
                                   DISPATCH_CRASH_AT="dispatch.before_claim")
    procs[0].join(timeout=120)
    assert procs[0].exitcode == -signal.SIGKILL
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert Permit.objects.get(id=permit.id).state == "issued"

    handed: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch.services.reconciliation, "run_now",
                        lambda *ids: handed.append(ids))
    # Within the grace the task may still be on its way: not handed over yet.
    assert reconcile_operations(now=timezone.now(), enqueue=True)["requeued_unclaimed"] == 0
    counts = reconcile_operations(now=timezone.now() + LATER, enqueue=True)
    assert counts["requeued_unclaimed"] == 1
    assert handed == [(proposal.id, live.owner.id)]
    # Delivered twice (at least once): one claim, one run.
    procs, results = start_workers(*handed[0], 2)
    assert sorted(collect(procs, results)) == [("ran", "completed"), ("refused", "")]
    assert Operation.objects.get(proposal_id=proposal.id).state == "completed"
    assert Attempt.objects.filter(operation__proposal_id=proposal.id).count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "sent"
    # Claimed now: nothing more to hand over.
    assert reconcile_operations(now=timezone.now() + LATER, enqueue=True)[
        "requeued_unclaimed"] == 0


def test_a_revocation_committed_before_the_workers_claim_wins(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    proposal, permit = approved(live)
    procs, results = start_workers(proposal.id, live.owner.id, 1, barrier=False,
                                   DISPATCH_PAUSE_AT="dispatch.before_claim",
                                   DISPATCH_PAUSE_DIR=str(tmp_path))
    wait_reached(tmp_path, "dispatch.before_claim")
    grant_revoke(actor=live.admin, grant_id=permit.grant_id, now=timezone.now())
    (tmp_path / "dispatch.before_claim.go").write_text("")

    assert collect(procs, results) == [("refused", "")]
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    assert Permit.objects.get(id=permit.id).state == "revoked"
    assert denial_codes(proposal.id) == {"authority_revoked": 1}
    assert list_all(destinations.directory)["email"] == []
    # A refused claim is the agent's to hear about, never reconciliation's to hand over.
    assert reconcile_operations(now=timezone.now() + LATER, enqueue=False)[
        "requeued_unclaimed"] == 0
