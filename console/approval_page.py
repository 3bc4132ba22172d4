"""What an approval's page shows (`console.views`): the action, its resources against the
revision now current, the decision column with its votes, what the permit led to, and the token
an open page is watched by."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from console import votes
from console.actions import action_view
from console.changes import ChangeView, change_views
from console.forms import CancelForm, DecisionForm
from console.outcomes import SETTLED
from console.presenters import (
    address_views,
    diff_fields,
    digest_matches,
    duration,
    paragraphs,
    parse_snapshot,
    pretty_json,
)
from dispatch.selectors.approvals import RevisionPair, revision_pairs
from dispatch.selectors.evidence import publication_evidence
from dispatch.selectors.executions import execution_usage
from dispatch.selectors.operations import operation_for_proposal
from protocols.approvals import effective_approval_state
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState, PermitState
from protocols.usage import Usage

if TYPE_CHECKING:
    from dispatch.models import ApprovalRequest, Principal

# A plain headline for the refusals a decision can meet; the service's message follows it.
DECISION_REFUSALS = {
    DenialCode.STALE_REVISION: "The resource was edited after this proposal was made.",
    DenialCode.PROPOSAL_MISMATCH: "The snapshot you confirmed is not this proposal's.",
    DenialCode.APPROVAL_DECIDED: "This approval was decided by someone else meanwhile.",
    DenialCode.APPROVAL_EXPIRED: "The approval window has passed.",
    DenialCode.PROTOCOL_STATE_INVALID: "The resource is no longer in a state that allows this.",
    DenialCode.ATTESTATION_FAILED: "The attestation this publication rests on failed: it "
                                   "cannot be approved.",
    DenialCode.ATTESTATION_MISSING: "The attestation this publication names does not exist.",
    DenialCode.ATTESTATION_UNBOUND: "The attestation is not of this exact report revision.",
}
# How often an approval's page asks after the operation it let run, until it settles.
FOLLOW_SECONDS = 2
# How often an open approval's page asks whether a colleague decided it, voted, or it lapsed.
WATCH_SECONDS = 3


def detail_context(
    principal: Principal, approval: ApprovalRequest, form: DecisionForm,
    *, denial: Denial | None = None, cancel_form: CancelForm | None = None,
) -> dict[str, Any]:
    now = timezone.now()
    proposal = approval.proposal
    snapshot = parse_snapshot(proposal.canonical)
    action = action_view(proposal.operation, proposal.contract_fingerprint, snapshot)
    contract = action.contract
    pairs = revision_pairs(viewer=principal, resource_refs=proposal.resource_refs)
    change = change_views(principal, [proposal]).get(proposal.id)
    resources = [_resource_view(pair, change) for pair in pairs]
    state = effective_approval_state(approval.state, approval.expires_at, now)
    tallied = votes.tally_view(principal, approval)
    decided = approval.state != ApprovalState.PENDING
    decision = getattr(approval, "decision", None) if decided else None
    permit = getattr(approval, "permit", None) if decided else None
    operation = operation_for_proposal(viewer=principal, proposal_id=proposal.id)
    arguments = snapshot.get("arguments", {})
    addresses = address_views(arguments)
    publication = publication_evidence(
        viewer=principal, proposal=proposal, contract=contract,
        arguments=arguments)
    context = {
        "approval": approval,
        "proposal": proposal,
        "state": state.value,
        "open": state is ApprovalState.PENDING,
        "snapshot_text": pretty_json(snapshot),
        "headline": action.headline,
        "message_views": action.messages,
        # what a message above does not already show, each argument's every leaf
        "fields": action.fields,
        "destination": snapshot.get("destination"),
        "addresses": addresses,
        "mixed_scripts": any(a.mixed for a in addresses),
        "digest_ok": digest_matches(proposal.canonical, proposal.digest),
        "contract": contract,
        "effects": sorted(e.value for e in contract.possible_effects) if contract else [],
        "resources": resources,
        "stale": any(r["stale"] for r in resources) or bool(change and change.stale),
        "change": change,
        "superseded_reason": _superseded_reason(change),
        "newer_approval_id": next((m.newer_approval_id for m in change.moved
                                   if m.newer_approval_id), None) if change else None,
        "time_left": duration(approval.expires_at - now),
        "decision": decision,
        "permit": permit,
        "operation": operation,
        **(follow_context(principal, approval) if decided else {}),
        "form": form,
        "denial": denial,
        "denial_headline": votes.refusal_headline(tallied, denial)
        or _refusal_headline(denial, decision, principal),
        "tally": tallied,
        "canonical_bytes": len(proposal.canonical.encode()),
        "usage": _reported(execution_usage(proposal.execution_id,
                                           principal_id=proposal.principal_id)),
        "publication": publication,
        "report_paragraphs": paragraphs(publication.body) if publication else [],
        # A grant the attestation check or the revision check would refuse is not offered
        # (Deny stays).
        "approvable": (publication is None or publication.refusal is None)
        and not (change and change.stale),
        # Before any claim; once claimed, the operation's page cancels it.
        "cancellable": state in (ApprovalState.PENDING, ApprovalState.GRANTED)
        and operation is None and proposal.cancelled_at is None,
        "cancel_form": cancel_form or CancelForm(),
        "watch_token": watch_token(state, tallied),
        "watch_seconds": WATCH_SECONDS,
    }
    return context


def _resource_view(pair: RevisionPair, change: ChangeView | None) -> dict[str, Any]:
    """A referenced revision against the one before it; for a stale proposal, against the
    revision now current: what that revision changes, the fields it leaves alone counted."""
    moved = next((m for m in change.moved if m.resource_id == pair.resource.id), None) \
        if change else None
    if moved is None:
        return {"pair": pair, "stale": pair.resource.current_revision != pair.revision.number,
                "diff": diff_fields(pair.previous.payload if pair.previous else None,
                                    pair.revision.payload)}
    rows = diff_fields(moved.bound_payload, moved.current_payload)
    changed = [row for row in rows if row.change != "same"]
    return {"pair": pair, "stale": True, "moved": moved, "diff": changed,
            "unchanged": len(rows) - len(changed)}


def _superseded_reason(change: ChangeView | None) -> str:
    """The reason a one-click denial of a stale proposal records: what superseded it."""
    if change is None or not change.moved:
        return ""
    parts = []
    for moved in change.moved:
        part = f"revision {moved.current} of {moved.kind} {moved.resource_id} is current"
        if moved.newer_approval_id:
            part += f" (its proposal waits in approval {moved.newer_approval_id})"
        parts.append(part)
    return "Superseded: " + "; ".join(parts) + "."


def _reported(usage: Usage) -> Usage | None:
    """The execution's model usage, where its adapter reported any."""
    return usage if usage.tokens or Decimal(usage.cost) else None


def _refusal_headline(denial: Denial | None, decision: Any, principal: Principal) -> str | None:
    if denial is None:
        return None
    if (denial.code is DenialCode.APPROVAL_DECIDED and decision is not None
            and decision.approver_id == principal.id):
        return "You already decided this approval (in another tab, or by a second click)."
    return DECISION_REFUSALS.get(denial.code)


def follow_context(principal: Principal, approval: ApprovalRequest) -> dict[str, Any]:
    """What came of a granted approval: the operation and its state, or, before any claim,
    whether the runtime dispatches it or who must, by when (the permit's expiry)."""
    permit = getattr(approval, "permit", None)
    operation = operation_for_proposal(viewer=principal, proposal_id=approval.proposal_id)
    if operation is not None:
        following = operation.state not in SETTLED
    else:
        following = permit is not None and permit.state == PermitState.ISSUED
    return {"approval": approval, "proposal": approval.proposal, "permit": permit,
            "operation": operation, "following": following,
            "follow_seconds": FOLLOW_SECONDS}


def watch_token(state: ApprovalState, tallied: votes.Tally | None) -> str:
    """What an open page shows of the approval's course: its state and the votes in."""
    return f"{state.value}.{tallied.granted if tallied else 0}"
