"""An outcome planned without a database (docs/design.md#outcomes): `outcome_step` decides the
target and stickiness, `outcome_plan` the kept result, the hook's record, the resources that
move, the audit event and the outbox rows, from the operation as loaded and plain facts."""

from __future__ import annotations

import pytest

from protocols.audit_kinds import RESOURCE_MOVES
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationEvent, OperationState, ResourceEvent
from protocols.outcomes import (
    ATTEMPT_OUTCOMES,
    STICKY,
    Facts,
    Loaded,
    outcome_plan,
    outcome_step,
)

DRAFT: JSONObject = {"id": "res_draft", "revision": 2}
SOURCE: JSONObject = {"id": "res_source", "revision": 1, "read": True}
BINDING: JSONObject = {"contract_fingerprint": "sha256:c", "execution_id": "exe_1"}


def loaded(state: OperationState = OperationState.CLAIMED, *, uncertain: bool = False,
           refs: tuple[JSONObject, ...] = ()) -> Loaded:
    return Loaded(id="op_1", proposal_id="prp_1", operation="email.send", state=state,
                  uncertain=uncertain, refs=refs, binding=BINDING)


def test_an_answer_completes_and_is_kept() -> None:
    op = loaded()
    step = outcome_step(op, ATTEMPT_OUTCOMES["completed"], end_attempt="completed")
    plan = outcome_plan(op, step, Facts(), attempt=1, end_attempt="completed",
                        result={"message_id": "m1"})
    assert (plan.source, plan.target) == (OperationState.CLAIMED, OperationState.COMPLETED)
    assert plan.answers and plan.result == {"message_id": "m1"}
    assert not plan.uncertain and plan.settles
    assert plan.audit_kind == "operation.completed"
    assert plan.audit_details == {"attempt": 1, "outcome": "completed", **BINDING}
    assert (plan.moved, plan.resource_event, plan.issue, plan.notice) == ((), None, None, None)


def test_a_failure_after_an_uncertain_attempt_is_unknown_and_says_why() -> None:
    op = loaded(uncertain=True)
    step = outcome_step(op, OperationEvent.FAIL_NO_EFFECT, end_attempt="failed_no_effect")
    assert (step.event, step.target, step.sticky, step.uncertain) == (
        OperationEvent.UNCERTAIN, OperationState.UNKNOWN, True, True)
    plan = outcome_plan(op, step, Facts(audit_error="550 refused"), attempt=2,
                        end_attempt="failed_no_effect", error="550 refused")
    assert plan.audit_kind == "operation.unknown"
    assert plan.audit_details["sticky"] == STICKY
    assert plan.answers  # the attempt's answer is still the answer it gave


def test_a_proven_absence_ends_the_uncertainty() -> None:
    op = loaded(OperationState.UNKNOWN, uncertain=True)
    step = outcome_step(op, OperationEvent.RETRY, absence_proven=True)
    assert step.target is OperationState.CLAIMED and not step.uncertain
    plan = outcome_plan(op, step, Facts(audit_evidence="lookup: absent"), attempt=1,
                        absence_proven=True, evidence="lookup: absent")
    assert plan.audit_details["absence_proven"] is True
    assert plan.audit_details["evidence"] == "lookup: absent"
    assert not plan.answers and plan.evidence == "lookup: absent"
    assert not plan.settles  # a retry is claimed again: no slot is freed


def test_an_uncertain_attempt_makes_the_operation_uncertain() -> None:
    step = outcome_step(loaded(), ATTEMPT_OUTCOMES["uncertain"], end_attempt="uncertain")
    assert step.target is OperationState.UNKNOWN and step.uncertain


def test_the_audit_holds_the_masked_texts_and_the_attempt_row_what_was_said() -> None:
    op = loaded()
    step = outcome_step(op, OperationEvent.FAIL_NO_EFFECT)
    plan = outcome_plan(op, step, Facts(audit_error="550 ***", audit_evidence="bounced ***"),
                        attempt=1, end_attempt="failed_no_effect",
                        error="550 customer@example.com", evidence="bounced customer@example.com")
    assert plan.audit_details["error"] == "550 ***"
    assert plan.audit_details["evidence"] == "bounced ***"
    assert plan.error == "550 customer@example.com"


def test_the_hooks_record_replaces_the_result_and_is_written_with_the_move() -> None:
    written: list[str] = []
    op = loaded()
    step = outcome_step(op, OperationEvent.COMPLETE)
    issued = ({"bytes": 10, "receipt": "rcp_1"}, lambda: written.append("receipt"))
    plan = outcome_plan(op, step, Facts(issued=issued), attempt=1, result={"bytes": 10})
    assert plan.result == {"bytes": 10, "receipt": "rcp_1"}
    assert written == []  # planned, not written
    assert plan.issue is not None
    plan.issue()
    assert written == ["receipt"]


def test_only_the_resources_it_moves_move_and_the_audit_lists_them() -> None:
    op = loaded(refs=(DRAFT, SOURCE))
    assert op.moved == (DRAFT,)
    step = outcome_step(op, OperationEvent.COMPLETE)
    plan = outcome_plan(op, step, Facts(resource_event=ResourceEvent.COMPLETE), attempt=1,
                        result={})
    assert plan.moved == (DRAFT,) and plan.resource_event is ResourceEvent.COMPLETE
    assert plan.audit_details[RESOURCE_MOVES] == [
        {"id": "res_draft", "revision": 2, "event": "complete"}]
    # Without an event for them (the caller found none moves), none moves.
    assert outcome_plan(op, step, Facts(), attempt=1).moved == ()


def test_the_agents_endpoints_get_one_row_each() -> None:
    op = loaded()
    step = outcome_step(op, OperationEvent.FAIL_NO_EFFECT)
    plan = outcome_plan(op, step, Facts(hearer="prn_agent"), attempt=1,
                        end_attempt="failed_no_effect")
    assert plan.notice is not None
    assert (plan.notice.event, plan.notice.hearer) == ("operation.failed_no_effect", "prn_agent")
    rows = plan.notice.rows(["ep_1", "ep_2"], "Send the refund")
    assert [(row.event, row.endpoint) for row in rows] == [
        ("operation.failed_no_effect", "ep_1"), ("operation.failed_no_effect", "ep_2")]
    assert rows[0].data == {"operation_id": "op_1", "proposal_id": "prp_1",
                            "operation": "email.send", "summary": "Send the refund",
                            "state": "failed_no_effect"}
    assert plan.notice.rows([], "Send the refund") == ()


def test_no_agent_hears_of_a_target_without_a_hearer() -> None:
    op = loaded()
    step = outcome_step(op, OperationEvent.FAIL_NO_EFFECT)
    assert outcome_plan(op, step, Facts(), attempt=1).notice is None


def test_a_move_the_table_does_not_allow_is_refused() -> None:
    with pytest.raises(Denial) as refused:
        outcome_step(loaded(OperationState.COMPLETED), OperationEvent.COMPLETE)
    assert refused.value.code is DenialCode.PROTOCOL_STATE_INVALID
