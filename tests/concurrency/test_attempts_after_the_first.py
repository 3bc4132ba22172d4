"""Every attempt after the first (docs/design.md#retries): the three defects of the path after
attempt 1, each across OS processes with a failpoint that forces the interleaving.

1. An uncertain transfer (the bank made it, the response was lost), then a retry that finds the
   bank down ("connection refused", a definite failure): the operation stays `unknown`, never
   `failed_no_effect` (which tells the agent to propose again under a new id, a new bank key: a
   second payment).
2. A revocation that commits while the worker waits out its retry backoff, or between
   reconciliation's retry and the worker's next attempt: no attempt starts after it.
3. A publication whose worker died mid-attempt, found absent by the publisher's lookup, is
   retried with its report back in `dispatching`, and ends `completed` with the report
   `published` (it used to stay `claimed` forever: the report was left `unknown`).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, Grant, Operation, Resource
from dispatch.services.authority import grant_revoke
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.reconciliation import reconcile_operations
from tests.conftest import World, make_world
from tests.faults.test_crash_boundaries import crash_at
from tests.support.destinations import Destinations, free_port, running_destinations
from tests.support.paused import PausedChild
from tests.support.processes import ROOT, child_env
from tests.support.research import Researcher

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TIMEOUT = timedelta(seconds=16)  # past the demo contracts' 15 s timeout
FENCED = timedelta(seconds=50)  # past 3 timeouts: no request of attempt 1 can still arrive


def attempts(operation: Operation) -> list[tuple[int, str]]:
    return list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome"))


def test_an_uncertain_transfer_then_a_down_bank_stays_unknown_and_pays_once(
    tmp_path: Path, settings: Any,
) -> None:
    smtp_port, bank_port = free_port(), free_port()
    directory = tmp_path / "destinations"
    settings.DESTINATIONS = {"dir": str(directory), "smtp_host": "127.0.0.1",
                             "smtp_port": smtp_port, "bank_url": f"http://127.0.0.1:{bank_port}"}
    world = make_world(timezone.now())
    proposal = world.propose_transfer(amount="25.00", memo="lose-response-once.test")
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)

    with running_destinations(directory, smtp_port=smtp_port, bank_port=bank_port):
        worker = PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_outcome")
        worker.reached()  # attempt 1: the bank made the transfer, the response was lost
    # The bank is down now: attempt 2 meets "connection refused", a definite failure.
    with worker:
        assert worker.result() == {"state": "unknown"}

    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert attempts(operation) == [(1, "uncertain"), (2, "failed_no_effect")]
    assert not AuditEvent.objects.filter(kind="operation.failed_no_effect").exists()
    unknown = AuditEvent.objects.get(kind="operation.unknown", operation_id=operation.id)
    assert unknown.details["sticky"]
    # The agent hears "unknown", never "no effect": nothing invites a second proposal, and the
    # bank holds the one transfer.
    transfers = list_all(directory)["bank"]
    assert [t["key"] for t in transfers] == [operation.id]


def _grant_of(world: World, operation: str) -> Grant:
    return next(g for g in Grant.objects.filter(subject=world.owner) if operation in g.operations)


def run_worker(operation_id: str) -> str:
    """The queued task, run by a worker in its own process; what it printed."""
    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation_id],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_revocation_during_the_retry_backoff_stops_the_next_attempt(
    tmp_path: Path, live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(amount="30.00", memo="lose-response-once.test")
    live.grant(proposal)
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)

    with PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_retry") as worker:
        worker.reached()  # attempt 1 ended uncertain; the worker waits out its backoff
        grant_revoke(actor=live.admin, grant_id=_grant_of(live, "payments.transfer").id,
                     now=timezone.now())
        assert worker.result() == {"state": "unknown"}

    operation.refresh_from_db()
    assert attempts(operation) == [(1, "uncertain")]  # attempt 2 never began
    refused = AuditEvent.objects.get(kind="operation.unknown", operation_id=operation.id)
    assert refused.details["code"] == "authority_revoked"
    assert refused.details["refused_attempt"] == 2
    assert len(list_all(destinations.directory)["bank"]) == 1


def test_a_revocation_between_reconciliation_and_the_worker_stops_the_retry(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_transfer(amount="40.00")
    live.grant(proposal)
    crash_at("attempt.before_call", live, proposal.id)  # attempt 1 open, nothing sent
    operation = Operation.objects.get(proposal_id=proposal.id)

    counts = reconcile_operations(now=timezone.now() + TIMEOUT, enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 1)  # absent at the bank: retry
    operation.refresh_from_db()
    assert operation.state == "claimed"
    grant_revoke(actor=live.admin, grant_id=_grant_of(live, "payments.transfer").id,
                 now=timezone.now())

    import subprocess
    import sys

    from tests.support.processes import ROOT, child_env  # the queued task, in a worker process

    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation.id],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    operation.refresh_from_db()
    assert attempts(operation) == [(1, "uncertain")]  # attempt 2 never began
    # Attempt 1 may still be delivered (its fence has not passed): the outcome stays unknown.
    assert operation.state == "unknown"
    assert list_all(destinations.directory)["bank"] == []


def test_a_publication_retried_after_a_proven_absence_is_published(
    live: World, destinations: Destinations,
) -> None:
    researcher = Researcher.enrol(live, destinations.sources_url)
    report, attestation = researcher.attested_report()
    proposal = researcher.propose_publication(report, attestation)
    live.grant(proposal)
    live.owner = researcher.agent  # the crash child dispatches as the proposal's principal
    crash_at("attempt.before_call", live, proposal.id)  # the worker dies inside attempt 1
    operation = Operation.objects.get(proposal_id=proposal.id)

    # Past the fence: the publisher's absence is proof; the report goes back to dispatching.
    counts = reconcile_operations(now=timezone.now() + FENCED, enqueue=False)
    assert (counts["unknown"], counts["retried"]) == (1, 1)
    report.refresh_from_db()
    assert report.state == "dispatching"

    import subprocess
    import sys

    from tests.support.processes import ROOT, child_env

    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation.id],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"completed"' in done.stdout
    operation.refresh_from_db()
    assert operation.state == "completed"
    assert attempts(operation) == [(1, "uncertain"), (2, "completed")]
    assert Resource.objects.get(id=report.id).state == "published"
    published = list_all(destinations.directory)["publications"]
    assert [p["key"] for p in published] == [operation.id]
    # Nothing left for reconciliation: the next pass finds nothing stuck.
    later = reconcile_operations(now=timezone.now() + FENCED * 2, enqueue=False)
    assert later["stuck"] == 0
