"""What the MCP gateway answers about a proposal (docs/mcp.md#answers), read from the store.

Every answer is computed from the proposal, its approval, its operation and the dispatcher's
own audit of a refused claim, never from anything the gateway process remembers: a task is
answered the same after a gateway restart, by any gateway process.

Nothing here decides a denial of its own. An approval that was denied, expired or revoked is
the dispatcher's code for that approval state (`protocols.approvals.approval_refusal`); a
granted approval whose claim at the decision was refused is the code the dispatcher audited
then (`dispatch.denied`); a granted approval with no claim yet is dispatched here, as the
requesting agent, through `proposal_dispatch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dispatch.models import (
    ApprovalRequest,
    AuditEvent,
    Decision,
    Operation,
    Principal,
    Proposal,
)
from dispatch.services.access import access_proposal_by_id
from dispatch.services.dispatcher import proposal_dispatch
from protocols.approvals import approval_refusal, effective_approval_state
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState, OperationState

#: The channel of a proposal made through the gateway (`Proposal.channel`).
MCP = "mcp"

#: The operation states an MCP answer reports as the call's end: an outcome, or `unknown`
#: (honest: the effect may or may not have happened; an admin settles it, docs/design.md#outcomes).
SETTLED = frozenset({
    OperationState.COMPLETED, OperationState.FAILED_NO_EFFECT, OperationState.UNKNOWN,
    OperationState.RECONCILED_COMPLETED, OperationState.RECONCILED_NO_EFFECT,
})


class Status(StrEnum):
    """Where a proposal's action stands, in the words of MCP tasks."""

    WORKING = "working"  # the approval is pending, or the operation runs
    COMPLETED = "completed"  # the operation settled: its state says how
    FAILED = "failed"  # refused: `denial` says why; nothing ran
    CANCELLED = "cancelled"  # withdrawn before the claim; nothing ran


@dataclass(frozen=True)
class Standing:
    """A proposal's standing: its status, the operation once there is one, the denial if it was
    refused."""

    proposal: Proposal
    status: Status
    operation: Operation | None = None
    denial: Denial | None = None
    approval_id: str | None = None  # the approval request an operator decides, if any

    @property
    def message(self) -> str:
        if self.denial is not None:
            return self.denial.message
        if self.operation is not None:
            return f"operation {self.operation.id} is {self.operation.state}"
        if self.status is Status.CANCELLED:
            return "the proposal was cancelled before it ran"
        if self.approval_id is None:
            return "not dispatched yet"
        return "waiting for an operator's decision"


def operation_brief(operation: Operation) -> JSONObject:
    """The operation as a tool answer carries it (docs/mcp.md#answers)."""
    return {"id": operation.id, "state": operation.state, "result": operation.result}


def outcome_body(standing: Standing) -> JSONObject:
    """`{"proposal_id", "operation": {"id","state","result"}}`: the answer of a settled call."""
    assert standing.operation is not None
    return {"proposal_id": standing.proposal.id,
            "operation": operation_brief(standing.operation)}


def proposal_standing(principal: Principal, proposal_id: object, *, now: datetime) -> Standing:
    """The standing of one of the principal's tenant's proposals (`not_found` otherwise). Only
    the agent's own MCP call is dispatched here (`standing_of`): reading another's proposal
    never acts for it."""
    proposal = access_proposal_by_id(principal, proposal_id)
    own_call = proposal.principal_id == principal.id and proposal.channel == MCP
    return standing_of(proposal, now=now, dispatch=own_call)


def standing_of(proposal: Proposal, *, now: datetime, dispatch: bool) -> Standing:
    """Where `proposal` stands. `dispatch`: the caller is the agent whose MCP call made it, and
    a granted (or ungated) proposal with no claim and no refusal yet is dispatched now, as that
    agent: the call asked for `dispatch_on_approval`."""
    operation = Operation.objects.filter(proposal_id=proposal.id).first()
    if operation is not None:
        settled = OperationState(operation.state) in SETTLED
        return Standing(proposal, Status.COMPLETED if settled else Status.WORKING, operation)
    if proposal.cancelled_at is not None:
        return Standing(proposal, Status.CANCELLED, denial=Denial(
            DenialCode.PROTOCOL_STATE_INVALID, "The proposal was cancelled."))
    approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).first()
    if approval is not None:
        state = effective_approval_state(approval.state, approval.expires_at, now)
        if state is ApprovalState.PENDING:
            return Standing(proposal, Status.WORKING, approval_id=approval.id)
        refusal = approval_refusal(state)
        if refusal is not None:
            return Standing(proposal, Status.FAILED, denial=refusal)
        decided_at = (Decision.objects.filter(approval_id=approval.id)
                      .values_list("decided_at", flat=True).first())
        refused = _claim_refused(proposal, since=decided_at)
    else:
        refused = _claim_refused(proposal, since=None)
    if refused is not None:  # answered once: asking again dispatches nothing more
        return Standing(proposal, Status.FAILED, denial=refused)
    if not dispatch:
        return Standing(proposal, Status.WORKING)
    # Granted (or ungated) with no claim yet: dispatch it as the requesting agent would.
    try:
        operation = proposal_dispatch(principal=proposal.principal, proposal_id=proposal.id,
                                      now=now)
    except Denial as denial:
        return Standing(proposal, Status.FAILED, denial=denial)
    settled = OperationState(operation.state) in SETTLED
    return Standing(proposal, Status.COMPLETED if settled else Status.WORKING, operation)


def _claim_refused(proposal: Proposal, *, since: datetime | None) -> Denial | None:
    """The code the dispatcher audited when it last refused this proposal's claim (at the
    decision, `dispatch_on_approval`, or a dispatch since), if it did. For an approved proposal
    only a refusal `since` the decision counts: one from before it (a dispatch tried while the
    approval was pending) is history, not the answer."""
    refusals = AuditEvent.objects.filter(proposal_id=proposal.id, kind="dispatch.denied")
    if since is not None:
        refusals = refusals.filter(at__gte=since)
    code = refusals.order_by("-id").values_list("details__code", flat=True).first()
    if not isinstance(code, str) or code not in DenialCode.__members__.values():
        return None
    return Denial(DenialCode(code))
