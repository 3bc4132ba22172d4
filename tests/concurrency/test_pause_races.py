"""The emergency stop against work in flight, across OS processes on the real database
(docs/design.md#approval-policies): a pause committed while a worker waits before its claim or
between two attempts: nothing runs after it; a claim that committed before the pause keeps its
claim but starts no attempt; resuming lets the pending work go on.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.models import Attempt, Operation
from dispatch.services.pauses import pause_lift, pause_set
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.paused import PausedChild
from tests.support.processes import ROOT, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TRANSFER = "payments.transfer"


def attempts(operation: Operation) -> list[tuple[int, str]]:
    return list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome"))


def run_worker(operation_id: str) -> str:
    """The queued task, run by a worker in its own process; what it printed."""
    done = subprocess.run([sys.executable, "-m", "tests.support.child", "execute", operation_id],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a resume hands to the broker, in order (the test runs each in a worker)."""
    found: list[str] = []
    monkeypatch.setattr("dispatch.queue.execute_now", found.append)
    return found


def pause(world: World, operation: str = "") -> None:
    pause_set(actor=world.admin, tenant=world.admin.tenant, operation=operation,
              now=timezone.now())


def resume(world: World, operation: str = "") -> None:
    pause_lift(actor=world.admin, tenant=world.admin.tenant, operation=operation,
               now=timezone.now())


def test_a_pause_committed_before_the_claim_refuses_it(
    live: World, destinations: Destinations, tmp_path: Path,
) -> None:
    proposal = live.propose_transfer("20.00")
    live.grant(proposal)
    with PausedChild(tmp_path, "dispatch", live.owner.id, proposal.id,
                     pause="dispatch.before_claim") as agent:
        agent.reached()  # every check made, the claim's transaction not begun
        pause(live, TRANSFER)
        assert agent.result() == {"denied": "paused"}
    assert not Operation.objects.exists()
    resume(live, TRANSFER)
    # The approval and its permit stood: the agent's dispatch now claims and runs it.
    done = subprocess.run([sys.executable, "-m", "tests.support.child", "dispatch",
                           live.owner.id, proposal.id], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert '"operation_id"' in done.stdout, done.stderr
    operation = Operation.objects.get(proposal=proposal)
    assert run_worker(operation.id).strip().endswith('{"state": "completed"}')
    assert [t["key"] for t in list_all(destinations.directory)["bank"]] == [operation.id]


def test_a_claim_in_flight_holds_the_pause_back_and_then_starts_no_attempt(
    live: World, destinations: Destinations, tmp_path: Path, queued: list[str],
) -> None:
    proposal = live.propose_transfer("21.00")
    live.grant(proposal)
    with PausedChild(tmp_path, "dispatch", live.owner.id, proposal.id,
                     pause="claim.pause_checked") as agent:
        # Inside the claim's transaction: no pause found, nothing written yet. Only the
        # tenant's row, share-locked by that read, holds the pause back.
        agent.reached()
        with PausedChild(tmp_path, "pause", live.admin.id, TRANSFER,
                         pause="pause.before_transaction") as admin:
            admin.reached()  # the admin's pause checked, its transaction not begun
            admin.release()
            time.sleep(1.0)
            assert admin.proc.poll() is None, "the pause did not wait for the claim in flight"
            assert "operation_id" in agent.result()
            assert admin.result() == {"paused": "contract payments.transfer"}
    operation = Operation.objects.get(proposal=proposal)
    # The claim committed first and stands; its worker comes after the pause: no attempt.
    assert run_worker(operation.id).strip().endswith('{"state": "claimed"}')
    assert attempts(operation) == []
    assert list_all(destinations.directory)["bank"] == []
    resume(live, TRANSFER)
    assert queued == [operation.id]
    assert run_worker(operation.id).strip().endswith('{"state": "completed"}')
    assert attempts(operation) == [(1, "completed")]


def test_a_pause_between_two_attempts_stops_the_second_until_the_resume(
    live: World, destinations: Destinations, tmp_path: Path, queued: list[str],
) -> None:
    proposal = live.propose_transfer("30.00", memo="lose-response-once.test")
    live.grant(proposal)
    from dispatch.services.dispatcher import proposal_dispatch

    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    with PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_retry") as worker:
        worker.reached()  # attempt 1 ended uncertain; the worker waits out its backoff
        pause(live)  # the whole tenant
        assert worker.result() == {"state": "claimed"}  # attempt 2 refused, nothing settled
    operation.refresh_from_db()
    assert (operation.state, operation.uncertain) == ("claimed", True)
    assert attempts(operation) == [(1, "uncertain")]
    assert len(list_all(destinations.directory)["bank"]) == 1  # attempt 1's, only
    resume(live)
    assert queued == [operation.id]
    assert run_worker(operation.id).strip().endswith('{"state": "completed"}')
    assert attempts(operation) == [(1, "uncertain"), (2, "completed")]
    # The same key: the bank deduplicated the retry; one payment.
    assert [t["key"] for t in list_all(destinations.directory)["bank"]] == [operation.id]
