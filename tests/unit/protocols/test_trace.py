"""The trace safety property (docs/design.md#dispatcher, protocols.trace): a replay of audit events
through the transition tables finds every dispatch without a preceding claim and every move its
table does not declare, and nothing in the traces the runtime writes."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from protocols.audit_kinds import OPERATION_EVENT_KINDS
from protocols.lifecycle import OPERATION_LIFECYCLE, OperationEvent
from protocols.trace import check_trace
from protocols.trace_events import TraceCode, TraceEvent

_ids: Iterator[int] = count(1)


def ev(kind: str, op: str = "op_1", proposal: str = "prp_1", **details: Any) -> TraceEvent:
    return TraceEvent(id=next(_ids), kind=kind, operation_id=op, proposal_id=proposal,
                      details=details)


def granted(proposal: str = "prp_1", permit: str = "prm_1",
            approval: str = "apr_1") -> TraceEvent:
    return ev("approval.granted", op="", proposal=proposal, approval_id=approval,
              permit_id=permit)


def claimed(op: str = "op_1", proposal: str = "prp_1", permit: str | None = None) -> TraceEvent:
    return ev("permit.claimed", op=op, proposal=proposal, permit_id=permit)


def started(number: int, op: str = "op_1", **details: Any) -> TraceEvent:
    return ev("attempt.started", op=op, attempt=number, **details)


def moved(kind: str, attempt: int, outcome: str, op: str = "op_1") -> TraceEvent:
    return ev(kind, op=op, attempt=attempt, outcome=outcome)


def codes(*events: TraceEvent) -> list[TraceCode]:
    return [v.code for v in check_trace(events).violations]


# --- traces the runtime writes: no violation --------------------------------------------------

VALID = {
    "approved and completed": [
        granted(), claimed(permit="prm_1"), started(1),
        moved("operation.completed", 1, "completed")],
    "no approval needed, failed before any effect": [
        claimed(), started(1), moved("operation.failed_no_effect", 1, "failed_no_effect")],
    "unknown, reconciled as completed": [
        claimed(), started(1), moved("operation.unknown", 1, "unknown"),
        moved("operation.reconciled", 1, "reconciled_completed")],
    "unknown, resolved as no effect, a late answer ignored": [
        claimed(), started(1), moved("operation.unknown", 1, "unknown"),
        ev("operation.evidence", evidence="inconclusive"),
        moved("operation.reconciled", 1, "reconciled_no_effect"),
        ev("attempt.ignored", attempt=1, outcome="completed")],
    "retried by the worker with the same key": [
        claimed(), started(1), started(2, retry_of=1),
        moved("operation.completed", 2, "completed")],
    "absent per lookup, retried by the reconciler": [
        claimed(), started(1), moved("operation.unknown", 1, "unknown"),
        moved("operation.retried", 1, "claimed"), started(2),
        moved("operation.completed", 2, "completed")],
    "cancelled after the claim, before any attempt": [
        claimed(), moved("operation.failed_no_effect", 0, "failed_no_effect"),
        ev("proposal.cancelled", before_claim=False)],
    "cancelled during an attempt": [
        claimed(), started(1), ev("proposal.cancelled", before_claim=False),
        moved("operation.failed_no_effect", 1, "failed_no_effect")],
    "refused by a changed deployment before any attempt": [
        claimed(), moved("operation.failed_no_effect", 0, "failed_no_effect")],
    "events of other records are not the operation's": [
        ev("proposal.created", op=""), ev("approval.requested", op=""),
        ev("dispatch.denied", op="", code="approval_pending"), granted(),
        ev("resource.created", op=""), claimed(permit="prm_1"), started(1),
        moved("operation.completed", 1, "completed")],
}


@pytest.mark.parametrize("events", VALID.values(), ids=VALID.keys())
def test_a_trace_the_runtime_writes_has_no_violation(events: list[TraceEvent]) -> None:
    report = check_trace(events)
    assert report.violations == []
    assert report.operations == 1
    assert report.events == len(events)


def test_the_report_counts_operations_permits_and_final_states() -> None:
    report = check_trace([
        granted(), claimed(permit="prm_1"), started(1),
        moved("operation.completed", 1, "completed"),
        claimed(op="op_2", proposal="prp_2"), started(1, op="op_2"),
        moved("operation.unknown", 1, "unknown", op="op_2")])
    assert (report.operations, report.permits) == (2, 1)
    assert report.states == {"completed": 1, "unknown": 1}


def test_every_operation_event_has_its_audit_kind() -> None:
    assert set(OPERATION_EVENT_KINDS) == {event for (_s, event) in
                                          OPERATION_LIFECYCLE.transitions}


# --- the safety property: every dispatch has a preceding claim ----------------------------------

def test_an_attempt_without_any_claim_is_a_violation() -> None:
    assert codes(started(1), moved("operation.completed", 1, "completed")) == [
        TraceCode.ATTEMPT_UNCLAIMED, TraceCode.EVENT_UNCLAIMED]


def test_an_attempt_before_its_claim_is_a_violation() -> None:
    assert codes(started(1), claimed()) == [TraceCode.ATTEMPT_UNCLAIMED]


def test_a_claim_of_another_operation_does_not_count() -> None:
    found = check_trace([claimed(op="op_2", proposal="prp_2"), started(1, op="op_1")])
    assert [(v.code, v.operation_id) for v in found.violations] == [
        (TraceCode.ATTEMPT_UNCLAIMED, "op_1")]


def test_the_violation_names_the_event() -> None:
    bad = started(1, op="op_9")
    (violation,) = check_trace([bad]).violations
    assert (violation.event_id, violation.operation_id, violation.kind) == (
        bad.id, "op_9", "attempt.started")
    assert "permit.claimed" in violation.message


# --- every transition is in its table ---------------------------------------------------------

@pytest.mark.parametrize("events", [
    [claimed(), claimed()],
    [claimed(), started(1), moved("operation.completed", 1, "completed"),
     moved("operation.completed", 1, "completed")],
    [claimed(), started(1), moved("operation.reconciled", 1, "reconciled_completed")],
    [claimed(), started(1), moved("operation.retried", 1, "claimed")],
    [claimed(), started(1), moved("operation.completed", 1, "completed"),
     moved("operation.unknown", 1, "unknown")],
], ids=["claimed twice", "completed twice", "reconciled while claimed",
        "retried while claimed", "unknown after completed"])
def test_a_move_its_table_does_not_declare_is_a_violation(events: list[TraceEvent]) -> None:
    assert codes(*events) == [TraceCode.TRANSITION_INVALID]


def test_a_recorded_outcome_the_table_does_not_give_is_a_violation() -> None:
    assert codes(claimed(), started(1), moved("operation.unknown", 1, "completed")) == [
        TraceCode.OUTCOME_MISMATCH]


def test_an_attempt_outside_claimed_is_a_violation() -> None:
    assert codes(claimed(), started(1), moved("operation.unknown", 1, "unknown"),
                 started(2)) == [TraceCode.ATTEMPT_STATE_INVALID]


@pytest.mark.parametrize("events", [
    [claimed(), started(2)],
    [claimed(), started(1), started(1)],
    [claimed(), started(1), started(2, retry_of=0)],
    [claimed(), started(1), started(2), moved("operation.completed", 1, "completed")],
    [claimed(), started(1), moved("operation.unknown", 0, "unknown")],
], ids=["skips attempt 1", "starts attempt 1 twice", "retries another attempt",
        "settled by an older attempt", "settled naming no attempt"])
def test_attempts_out_of_order_are_a_violation(events: list[TraceEvent]) -> None:
    assert codes(*events) == [TraceCode.ATTEMPT_OUT_OF_ORDER]


def test_an_undeclared_kind_on_an_operation_is_a_violation() -> None:
    assert codes(claimed(), ev("operation.teleported")) == [TraceCode.KIND_UNDECLARED]


def test_an_operation_event_without_its_operation_is_a_violation() -> None:
    assert codes(ev("attempt.started", op="", attempt=1)) == [TraceCode.OPERATION_MISSING]


def test_one_violation_does_not_hide_the_next() -> None:
    assert codes(claimed(), started(1), moved("operation.completed", 1, "completed"),
                 moved("operation.completed", 1, "completed"), started(2)) == [
        TraceCode.TRANSITION_INVALID, TraceCode.ATTEMPT_STATE_INVALID]


# --- the permit's own table: one-shot, bound to its proposal -----------------------------------

def test_a_permit_claimed_by_two_operations_is_a_violation() -> None:
    assert codes(granted(), claimed(permit="prm_1"),
                 claimed(op="op_2", permit="prm_1")) == [TraceCode.TRANSITION_INVALID,
                                                         TraceCode.PROPOSAL_CLAIMED_TWICE]


def test_a_permit_no_grant_issued_is_a_violation() -> None:
    assert codes(claimed(permit="prm_forged")) == [TraceCode.PERMIT_UNISSUED]


def test_a_permit_of_another_proposal_is_a_violation() -> None:
    assert codes(granted(proposal="prp_2", permit="prm_2"),
                 claimed(proposal="prp_1", permit="prm_2")) == [TraceCode.PERMIT_MISMATCH]


@pytest.mark.parametrize("lapse", [
    ev("permit.revoked", op="", permit_id="prm_1", approval_id="apr_1"),
    ev("approval.expired", op="", approval_id="apr_1"),
    ev("proposal.cancelled", op="", before_claim=True),
], ids=["revoked", "expired", "cancelled"])
def test_a_permit_claimed_after_it_lapsed_is_a_violation(lapse: TraceEvent) -> None:
    assert codes(granted(), lapse, claimed(permit="prm_1")) == [
        TraceCode.TRANSITION_INVALID]


def test_a_revocation_after_the_claim_is_a_violation() -> None:
    """permits_revoke_resting_on moves only issued permits: a claimed one ran."""
    assert codes(granted(), claimed(permit="prm_1"),
                 ev("permit.revoked", op="", permit_id="prm_1")) == [
        TraceCode.TRANSITION_INVALID]


def test_a_claim_without_a_permit_after_a_cancellation_is_a_violation() -> None:
    assert codes(ev("proposal.cancelled", op="", before_claim=True), claimed()) == [
        TraceCode.CLAIM_AFTER_CANCEL]


def test_a_second_operation_of_one_proposal_is_a_violation() -> None:
    assert codes(claimed(op="op_1"), claimed(op="op_2")) == [
        TraceCode.PROPOSAL_CLAIMED_TWICE]


def test_the_tables_are_the_ones_of_protocols_lifecycle() -> None:
    """The replay reads the one table; it has no copy of its own."""
    assert OPERATION_EVENT_KINDS[OperationEvent.CLAIM] == "permit.claimed"


# --- evidence records follow the completion they are issued by (docs/design.md#evidence) ----------

def test_a_receipt_and_an_attestation_follow_their_completion() -> None:
    fetch = [claimed(), started(1), moved("operation.completed", 1, "completed"),
             ev("receipt.issued", receipt_id="evr_1")]
    attest = [claimed(op="op_2", proposal="prp_2"), started(1, op="op_2"),
              moved("operation.completed", 1, "completed", op="op_2"),
              ev("attestation.issued", op="op_2", attestation_id="att_1")]
    assert check_trace([*fetch, *attest]).violations == []


@pytest.mark.parametrize("events", [
    [claimed(), started(1), ev("receipt.issued", receipt_id="evr_1")],
    [claimed(), started(1), moved("operation.failed_no_effect", 1, "failed_no_effect"),
     ev("attestation.issued", attestation_id="att_1")],
    [claimed(), started(1), moved("operation.unknown", 1, "unknown"),
     ev("receipt.issued", receipt_id="evr_1")],
], ids=["before the outcome", "after no effect", "after unknown"])
def test_an_evidence_record_without_a_completion_is_a_violation(
    events: list[TraceEvent],
) -> None:
    assert codes(*events) == [TraceCode.EVIDENCE_UNSETTLED]


def test_a_second_evidence_record_of_one_operation_is_a_violation() -> None:
    assert codes(claimed(), started(1), moved("operation.completed", 1, "completed"),
                 ev("receipt.issued", receipt_id="evr_1"),
                 ev("receipt.issued", receipt_id="evr_2")) == [TraceCode.EVIDENCE_TWICE]


@pytest.mark.parametrize("events", [
    [claimed(), started(1), moved("operation.unknown", 1, "unknown"),
     moved("operation.reconciled", 1, "reconciled_completed"),
     ev("receipt.issued", receipt_id="evr_1")],
    [claimed(), started(1), moved("operation.completed", 1, "completed"),
     ev("proposal.cancelled", before_claim=False), ev("receipt.issued", receipt_id="evr_1")],
], ids=["after a reconciliation", "not right after the completion"])
def test_evidence_is_issued_only_right_after_a_completion(events: list[TraceEvent]) -> None:
    assert codes(*events) == [TraceCode.EVIDENCE_UNSETTLED]


# --- resources and approvals: each move in its own table ------------------------------------

def created(resource: str = "res_1", kind: str = "email_draft") -> TraceEvent:
    return TraceEvent(id=next(_ids), kind="resource.created", operation_id="", proposal_id="",
                      details={"resource_id": resource, "revision": 1, "kind": kind})


def moves(*events: str, resource: str = "res_1", revision: int = 1) -> list[dict[str, Any]]:
    return [{"id": resource, "revision": revision, "event": e} for e in events]


def requested(approval: str = "apr_1", proposal: str = "prp_1") -> TraceEvent:
    return ev("approval.requested", op="", proposal=proposal, approval_id=approval)


SENT_EMAIL = [
    created(), ev("proposal.created", op="", resource_moves=moves("propose")), requested(),
    ev("approval.granted", op="", approval_id="apr_1", permit_id="prm_1",
       resource_moves=moves("grant")),
    ev("permit.claimed", permit_id="prm_1", resource_moves=moves("claim")), started(1),
    ev("operation.completed", attempt=1, outcome="completed", resource_moves=moves("complete"))]


def test_a_sent_email_replays_its_draft_and_its_approval() -> None:
    report = check_trace(SENT_EMAIL)
    assert report.violations == []
    assert (report.resources, report.approvals, report.permits) == (1, 1, 1)


@pytest.mark.parametrize(("events", "code", "message"), [
    ([*SENT_EMAIL, ev("proposal.created", op="", proposal="prp_2",
                      resource_moves=moves("propose"))],
     TraceCode.TRANSITION_INVALID,
     "resource res_1 (email_draft): 'propose' is not allowed in state 'sent'"),
    ([created(), ev("resource.revised", op="", resource_id="res_1", revision=2),
      ev("proposal.created", op="", resource_moves=moves("propose"))],
     TraceCode.RESOURCE_STALE,
     "resource res_1 (email_draft): 'propose' of revision 1; its current revision is 2"),
    ([created(), ev("proposal.created", op="", resource_moves=moves("teleport"))],
     TraceCode.TRANSITION_INVALID,
     "resource res_1 (email_draft): 'teleport' is not allowed in state 'draft'"),
    ([*SENT_EMAIL, ev("resource.revised", op="", resource_id="res_1", revision=2)],
     TraceCode.TRANSITION_INVALID,
     "resource res_1 (email_draft): 'edit' is not allowed in state 'sent'"),
    ([created("res_q", "question"), ev("question.answered", resource_moves=moves(
        "answer", resource="res_q"))],
     TraceCode.EVENT_UNCLAIMED, "'question.answered' before the operation's permit.claimed"),
], ids=["proposed once sent", "a stale revision", "an undeclared event", "edited once sent",
        "answered by no claimed operation"])
def test_a_resource_move_out_of_its_table_is_a_violation(
    events: list[TraceEvent], code: TraceCode, message: str,
) -> None:
    [violation] = check_trace(events).violations
    assert (violation.code, violation.message) == (code, message)


def test_a_move_of_a_resource_the_trace_never_saw_created_is_not_checked() -> None:
    assert codes(ev("proposal.created", op="", resource_moves=moves("complete"))) == []


def test_an_event_already_reported_moves_no_resource() -> None:
    """A lost claim is reported at the events it breaks, not again at the draft."""
    without_claim = [e for e in SENT_EMAIL if e.kind != "permit.claimed"]
    assert codes(*without_claim) == [TraceCode.ATTEMPT_UNCLAIMED, TraceCode.EVENT_UNCLAIMED]


@pytest.mark.parametrize(("events", "message"), [
    ([requested(), ev("approval.denied", op="", approval_id="apr_1"),
      ev("approval.granted", op="", approval_id="apr_1", permit_id="prm_1")],
     "approval apr_1: 'grant' is not allowed in state 'denied'"),
    ([requested(), ev("approval.expired", op="", approval_id="apr_1"),
      ev("approval.expired", op="", approval_id="apr_1")],
     "approval apr_1: 'expire' is not allowed in state 'expired'"),
    ([ev("renewal.requested", renewal_id="rnw_1", attempt=2), claimed(),
      ev("renewal.denied", renewal_id="rnw_1", attempt=2),
      ev("renewal.granted", renewal_id="rnw_1", attempt=2)],
     "renewal rnw_1: 'grant' is not allowed in state 'denied'"),
], ids=["granted once denied", "expired twice", "renewal granted once denied"])
def test_an_approval_move_out_of_its_table_is_a_violation(
    events: list[TraceEvent], message: str,
) -> None:
    violations = check_trace(events).violations
    assert [(v.code, v.message) for v in violations][-1:] == [
        (TraceCode.TRANSITION_INVALID, message)]


def test_a_cancellation_revokes_a_pending_approval_and_leaves_a_denied_one() -> None:
    assert codes(requested(), ev("proposal.cancelled", op="", before_claim=True),
                 ev("approval.granted", op="", approval_id="apr_1", permit_id="prm_1")) == [
        TraceCode.TRANSITION_INVALID]
    assert codes(requested(), ev("approval.denied", op="", approval_id="apr_1"),
                 ev("proposal.cancelled", op="", before_claim=True)) == []


def test_a_claim_without_a_permit_of_a_proposal_that_asked_for_approval_is_a_violation(
) -> None:
    [violation] = check_trace([requested(), claimed(permit=None)]).violations
    assert violation.code is TraceCode.PERMIT_MISSING
    assert violation.message == "proposal prp_1 asked for approval apr_1; it was claimed " \
                                "without a permit"
    assert codes(requested(proposal="prp_2"), claimed(permit=None)) == []  # another proposal
