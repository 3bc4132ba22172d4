"""The API's presenters: the JSON shapes of docs/rest-api.md#calls, built from objects that an
authorizing loader (`dispatch.services.access`) or a tenant-scoped selector (`dispatch.selectors`)
already returned.

Nothing here writes, queries by a client-supplied id, or decides who may see what.
"""

from __future__ import annotations

from datetime import datetime

from dispatch.models import (
    ApprovalRequest,
    AuditEvent,
    Grant,
    Operation,
    Pause,
    Permit,
    Proposal,
    Resource,
    Revision,
)
from dispatch.selectors.votes import Cast
from dispatch.services.notifications import proposal_summary, public_approval_url
from dispatch.services.pauses import pause_scope
from dispatch.services.resources import resource_current
from dispatch.services.voters import counting_voters
from protocols.approvals import effective_approval_state
from protocols.contracts import OperationContract
from protocols.jsontypes import JSONObject


def resource_view(resource: Resource, revision: Revision | None = None) -> JSONObject:
    revision = revision or resource_current(resource)
    return {"id": resource.id, "kind": resource.kind, "revision": revision.number,
            "digest": revision.digest, "state": resource.state, "payload": revision.payload}


def proposal_view(
    proposal: Proposal, *, now: datetime, fresh: bool = False,
    approval: ApprovalRequest | None = None,
) -> JSONObject:
    """The proposal of docs/rest-api.md#calls. `fresh`: this request just made it, with `approval`
    (or none): it has no operation and no permit yet, and nothing is read back."""
    if not fresh:
        approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).first()
    operation = None if fresh else Operation.objects.filter(
        proposal_id=proposal.id).values_list("id", "state").first()
    return {
        "id": proposal.id,
        "operation": proposal.operation,
        "digest": proposal.digest,
        "canonical": proposal.canonical,
        "contract_fingerprint": proposal.contract_fingerprint,
        "execution_id": proposal.execution_id,
        "approval": None if approval is None else approval_view(approval, now=now,
                                                                fresh=fresh),
        "operation_id": operation[0] if operation else None,
        "operation_state": operation[1] if operation else None,
    }


def approval_view(
    approval: ApprovalRequest, *, now: datetime, fresh: bool = False,
) -> JSONObject:
    # Expired, whether or not the periodic expiry has recorded it yet.
    state = effective_approval_state(approval.state, approval.expires_at, now).value
    permit_id = None if fresh else Permit.objects.filter(approval_id=approval.id).values_list(
        "id", flat=True).first()
    return {"id": approval.id, "state": state, "role": approval.role,
            "expires_at": approval.expires_at, "permit_id": permit_id,
            "quorum": approval.quorum, "votes": [] if fresh else votes_view(approval),
            "url": public_approval_url(approval.id)}


def votes_view(approval: ApprovalRequest) -> list[JSONObject]:
    """The grants counted toward the approval's quorum, oldest first
    (docs/design.md#approval-policies): who and when, never the digest or a reason. A grant
    whose voter was deactivated or demoted since no longer counts, and is not listed."""
    return [{"by": name, "at": at} for name, at in approval.votes.filter(
        counting_voters(approval.role), outcome="grant").order_by(
        "voted_at", "id").values_list("approver__name", "voted_at")]


def approval_item_view(approval: ApprovalRequest, *, votes: list[Cast],
                       now: datetime) -> JSONObject:
    """An approval of `GET approvals/` (docs/rest-api.md#admin): what an approver outside the
    console needs to decide it, the sentence the console shows on top of it included. `votes`:
    its grants that count (`dispatch.selectors.votes`)."""
    proposal = approval.proposal
    return {"id": approval.id,
            "state": effective_approval_state(approval.state, approval.expires_at, now).value,
            "proposal_id": proposal.id, "operation": proposal.operation,
            "summary": proposal_summary(proposal), "digest": proposal.digest,
            "requested_by": proposal.principal.name, "expires_at": approval.expires_at,
            "quorum": approval.quorum,
            "votes": [{"by": cast.approver_name, "at": cast.at} for cast in votes]}


def pause_view(pause: Pause) -> JSONObject:
    return {"id": pause.id, "scope": pause_scope(pause), "operation": pause.operation or None,
            "agent": None if pause.agent is None else pause.agent.name, "reason": pause.reason,
            "paused_by": pause.paused_by, "paused_at": pause.paused_at}


def operation_view(operation: Operation) -> JSONObject:
    attempts = [
        {"number": a.number, "started_at": a.started_at, "ended_at": a.ended_at,
         "outcome": a.outcome or None, "error": a.error or None}
        for a in operation.attempts.order_by("number")
    ]
    return {"id": operation.id, "proposal_id": operation.proposal_id, "state": operation.state,
            "attempts": attempts, "result": operation.result}


def contract_view(contract: OperationContract) -> JSONObject:
    approval = contract.approval_requirement
    return {
        "name": contract.qualified_name,
        "version": contract.contract_version,
        "fingerprint": contract.fingerprint,
        "input_schema": dict(contract.input_type),
        "effects": sorted(e.value for e in contract.possible_effects),
        "approval": None if approval is None else {"role": approval.role,
                                                   "expires_in": approval.expires_in},
        "idempotency": contract.idempotency_contract.value,
    }


def grant_view(grant: Grant) -> JSONObject:
    return {"id": grant.id, "issuer": grant.issuer, "subject": grant.subject.name,
            "operations": list(grant.operations), "scope": grant.scope,
            "not_before": grant.not_before, "expires_at": grant.expires_at,
            "revoked_at": grant.revoked_at, "parent_id": grant.parent_id,
            "budget": grant.budget}


def audit_view(event: AuditEvent) -> JSONObject:
    return {"id": event.id, "at": event.at, "kind": event.kind, "actor": event.actor,
            "operation_id": event.operation_id or None, "proposal_id": event.proposal_id or None,
            "digest": event.digest or None, "details": event.details}
