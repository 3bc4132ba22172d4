"""The approval gate (protocols.approvals): one denial, in one order, for every way a permit
cannot carry a proposal; and the one rule for a pending approval past its window."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from protocols.approvals import Binding, PermitView, effective_approval_state, permit_refusal
from protocols.denials import DenialCode
from protocols.lifecycle import ApprovalState, PermitState

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
BINDING = Binding(digest="sha256:" + "a" * 64, requester="prn_1", execution_id="exe_1",
                  contract_fingerprint="sha256:c", destination_fingerprint="sha256:d",
                  policy_fingerprint="sha256:p")


def refusal(**overrides: object) -> DenialCode | None:
    arguments: dict[str, object] = {
        "approval_state": ApprovalState.GRANTED, "approval_expires_at": LATER,
        "permit": PermitView(id="prm_1", state=PermitState.ISSUED, expires_at=LATER,
                             binding=BINDING),
        "proposal": BINDING, "now": NOW}
    arguments.update(overrides)
    denial = permit_refusal(**arguments)  # type: ignore[arg-type]
    return None if denial is None else denial.code


def test_a_granted_approval_with_its_issued_permit_passes() -> None:
    assert refusal() is None


@pytest.mark.parametrize(("state", "code"), [
    (ApprovalState.PENDING, DenialCode.APPROVAL_PENDING),
    (ApprovalState.DENIED, DenialCode.APPROVAL_DENIED),
    (ApprovalState.EXPIRED, DenialCode.APPROVAL_EXPIRED),
    (ApprovalState.REVOKED, DenialCode.APPROVAL_REVOKED),
])
def test_an_approval_not_granted_says_how(state: ApprovalState, code: DenialCode) -> None:
    assert refusal(approval_state=state) is code


def test_no_approval_request_is_approval_required() -> None:
    assert refusal(approval_state=None, approval_expires_at=None) is \
        DenialCode.APPROVAL_REQUIRED


def test_a_pending_approval_past_its_window_is_expired() -> None:
    assert refusal(approval_state=ApprovalState.PENDING, approval_expires_at=NOW) is \
        DenialCode.APPROVAL_EXPIRED
    assert effective_approval_state("pending", NOW, NOW) is ApprovalState.EXPIRED
    assert effective_approval_state("pending", LATER, NOW) is ApprovalState.PENDING
    assert effective_approval_state("granted", NOW, NOW) is ApprovalState.GRANTED


@pytest.mark.parametrize(("state", "expires_at", "code"), [
    (PermitState.CLAIMED, LATER, DenialCode.PERMIT_CLAIMED),
    (PermitState.REVOKED, LATER, DenialCode.APPROVAL_REVOKED),
    (PermitState.EXPIRED, LATER, DenialCode.APPROVAL_EXPIRED),
    (PermitState.ISSUED, NOW, DenialCode.APPROVAL_EXPIRED),
])
def test_a_permit_that_cannot_run_says_why(
    state: PermitState, expires_at: datetime, code: DenialCode,
) -> None:
    assert refusal(permit=PermitView(id="prm_1", state=state, expires_at=expires_at,
                                     binding=BINDING)) is code


def test_a_granted_approval_without_a_permit_is_a_store_inconsistency() -> None:
    assert refusal(permit=None) is DenialCode.PERSISTENCE_FAILURE


@pytest.mark.parametrize(("field", "code"), [
    ("digest", DenialCode.PROPOSAL_MISMATCH),
    ("requester", DenialCode.PROPOSAL_MISMATCH),
    ("execution_id", DenialCode.PROPOSAL_MISMATCH),
    ("contract_fingerprint", DenialCode.CONTRACT_MISMATCH),
    ("destination_fingerprint", DenialCode.PROPOSAL_MISMATCH),
    ("policy_fingerprint", DenialCode.PROPOSAL_MISMATCH),
])
def test_every_bound_field_must_equal_the_proposals(field: str, code: DenialCode) -> None:
    other = replace(BINDING, **{field: "other"})
    assert refusal(proposal=other) is code
