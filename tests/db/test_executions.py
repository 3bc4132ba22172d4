"""Executions, their journal and the one drive loop (`dispatch.services.executions`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Max

from demo.destinations.runner import list_all
from dispatch.models import AuditEvent, Execution, Operation, TranscriptEntry
from dispatch.services import executions
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.executions import (
    Pending,
    Running,
    Settled,
    execution_create,
    execution_move,
    journal_append,
    journal_read,
    proposal_drive,
)
from dispatch.services.proposals import proposal_create
from protocols.denials import Denial
from protocols.lifecycle import Outcome
from protocols.lifecycle_runs import ExecutionEvent
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

CALL = TranscriptEntry.Kind.TOOL_CALL
RESULT = TranscriptEntry.Kind.TOOL_RESULT


def lookup(world: World, customer: str = "cus-001") -> Any:
    return proposal_create(principal=world.owner, operation="crm.lookup",
                           arguments={"customer_id": customer}, now=world.now)


# --- the journal --------------------------------------------------------------------------------


def test_entries_are_numbered_in_order_and_touch_the_execution(world: World) -> None:
    execution = execution_create(principal=world.owner, adapter="test", now=world.now)
    later = world.now + timedelta(seconds=5)
    journal_append(execution_id=execution.id, kind=CALL, call_id="call-1",
                   payload={"n": 1}, now=world.now)
    journal_append(execution_id=execution.id, kind=RESULT, call_id="call-1",
                   payload={"n": 2}, now=later)
    journal_append(execution_id=execution.id, kind=TranscriptEntry.Kind.FINAL, call_id="",
                   payload={"n": 3}, now=later)
    assert [(e["seq"], e["kind"], e["payload"]) for e in journal_read(
        execution_id=execution.id)] == [(1, CALL, {"n": 1}), (2, RESULT, {"n": 2}),
                                        (3, "final", {"n": 3})]
    assert Execution.objects.get(id=execution.id).updated_at == later


def test_an_entry_already_journaled_for_a_call_is_the_record(world: World) -> None:
    execution = execution_create(principal=world.owner, adapter="test", now=world.now)
    first = journal_append(execution_id=execution.id, kind=RESULT, call_id="call-1",
                           payload={"writer": "first"}, now=world.now)
    second = journal_append(execution_id=execution.id, kind=RESULT, call_id="call-1",
                            payload={"writer": "second"}, now=world.now)
    assert first == second == {"writer": "first"}
    # Another kind under the same call id is another entry.
    journal_append(execution_id=execution.id, kind=CALL, call_id="call-1",
                   payload={"writer": "call"}, now=world.now)
    assert TranscriptEntry.objects.filter(execution=execution).count() == 2


def test_a_seq_taken_by_a_concurrent_writer_is_retried_with_the_next(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This writer read the last seq before a rival's entry committed, so its insert collides
    on the seq: it reads again and appends after the rival (on PostgreSQL the cross-process
    race in tests/concurrency does this for real)."""
    execution = execution_create(principal=world.owner, adapter="test", now=world.now)
    journal_append(execution_id=execution.id, kind=CALL, call_id="rival",
                   payload={"writer": "rival"}, now=world.now)
    reads: list[str] = []

    def stale_on_first_read(field: str) -> Any:
        reads.append(field)
        return Max(field) - 1 if len(reads) == 1 else Max(field)

    monkeypatch.setattr(executions, "Max", stale_on_first_read)
    recorded = journal_append(execution_id=execution.id, kind=CALL, call_id="call-1",
                              payload={"writer": "me"}, now=world.now)
    assert recorded == {"writer": "me"}
    assert reads == ["seq", "seq"]
    assert [(e["seq"], e["call_id"]) for e in journal_read(execution_id=execution.id)] == [
        (1, "rival"), (2, "call-1")]


def test_a_finished_execution_stays_finished(world: World) -> None:
    execution = execution_create(principal=world.owner, adapter="test", now=world.now)
    assert execution.state == Execution.State.RUNNING
    assert execution_move(execution, ExecutionEvent.WAIT, now=world.now, actor="test")
    assert execution_move(execution, ExecutionEvent.FINISH, now=world.now, actor="test",
                          final="done")
    # A run that raced the finishing one and still thinks it waits does not reopen it.
    assert not execution_move(execution, ExecutionEvent.WAIT, now=world.now, actor="test")
    stored = Execution.objects.get(id=execution.id)
    assert (stored.state, stored.final) == ("finished", "done")
    with pytest.raises(ValueError, match="running only"):
        execution_move(execution, "running", now=world.now, actor="test")  # type: ignore[arg-type]


# --- the drive loop -----------------------------------------------------------------------------


def test_no_approval_needed_settles_inline(world: World) -> None:
    found = proposal_drive(principal=world.owner, proposal_id=lookup(world).id, now=world.now,
                           execute=True)
    assert isinstance(found, Settled)
    assert found.outcome is Outcome.COMPLETED
    assert found.operation.result["name"] == "Ada Lovelace"
    missing = proposal_drive(principal=world.owner, proposal_id=lookup(world, "cus-404").id,
                             now=world.now, execute=True)
    assert isinstance(missing, Settled)
    assert missing.outcome is Outcome.FAILED_NO_EFFECT


def test_pending_approval_waits_then_the_claim_runs_once(
    live: World, destinations: Destinations,
) -> None:
    proposal = live.propose_email(live.draft())

    pending = proposal_drive(principal=live.owner, proposal_id=proposal.id, now=live.now,
                             execute=False)
    assert pending == Pending(proposal_id=proposal.id, approval_id=proposal.approval.id)
    assert not Operation.objects.exists()

    live.grant(proposal)
    running = proposal_drive(principal=live.owner, proposal_id=proposal.id, now=live.now,
                             execute=False)  # a worker would run it
    assert isinstance(running, Running)
    assert running.operation.state == "claimed"

    settled = proposal_drive(principal=live.owner, proposal_id=proposal.id, now=live.now,
                             execute=True)
    assert isinstance(settled, Settled)
    assert (settled.outcome, settled.operation.id) == (Outcome.COMPLETED, running.operation.id)
    again = proposal_drive(principal=live.owner, proposal_id=proposal.id, now=live.now,
                           execute=True)
    assert isinstance(again, Settled) and again.operation.id == running.operation.id
    assert len(list_all(destinations.directory)["email"]) == 1
    assert not AuditEvent.objects.filter(kind="dispatch.denied").exists()


def test_a_caller_that_cannot_wait_hears_approval_pending(world: World) -> None:
    proposal = world.propose_email(world.draft())
    with pytest.raises(Denial) as refused:
        proposal_drive(principal=world.owner, proposal_id=proposal.id, now=world.now,
                       execute=True, await_approval=False)
    assert refused.value.code.value == "approval_pending"


def test_an_expired_approval_is_the_dispatchers_refusal(world: World) -> None:
    proposal = world.propose_email(world.draft())
    later = proposal.approval.expires_at + timedelta(seconds=1)
    with pytest.raises(Denial) as refused:
        proposal_drive(principal=world.owner, proposal_id=proposal.id, now=later, execute=True)
    assert refused.value.code.value == "approval_expired"


def test_the_operation_a_concurrent_driver_claimed_is_the_answer(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rival claims between this driver's look-up and its dispatch: this one's dispatch
    hears `permit_claimed`, and the rival's operation is the answer."""
    proposal = world.propose_email(world.draft())
    world.grant(proposal)
    look_up = executions._operation_for
    calls: list[str] = []

    def rival_claims_first(proposal_id: str) -> Operation | None:
        if not calls:
            proposal_dispatch(principal=world.owner, proposal_id=proposal_id, now=world.now,
                              enqueue=False)
            calls.append("rival")
            return None
        return look_up(proposal_id)

    monkeypatch.setattr(executions, "_operation_for", rival_claims_first)
    found = proposal_drive(principal=world.owner, proposal_id=proposal.id, now=world.now,
                           execute=False)
    assert isinstance(found, Running)
    assert found.operation.id == Operation.objects.get(proposal_id=proposal.id).id
    assert AuditEvent.objects.get(kind="dispatch.denied").details["code"] == "permit_claimed"


def test_a_refusal_with_no_operation_is_raised(world: World) -> None:
    proposal = world.propose_email(world.draft())
    world.grant(proposal)
    with pytest.raises(Denial) as refused:
        proposal_drive(principal=world.owner, proposal_id=proposal.id,
                       permit_id="prm_forged", now=world.now, execute=True)
    assert refused.value.code.value == "not_found"
    assert not Operation.objects.exists()
