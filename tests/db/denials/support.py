"""What the denial tests share: realistic calls, the store a refusal must leave as it
was, and the payload of a draft."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatch.models import (
    ApprovalRequest,
    AuditEvent,
    BudgetCounter,
    Decision,
    Grant,
    Operation,
    Permit,
    Proposal,
    Resource,
    Revision,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import revision_create
from protocols.denials import Denial
from tests.conftest import MAILBOX, World

WRONG_DIGEST = "sha256:" + "0" * 64
PAYLOAD = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
           "body": "We have refunded your order."}


def store() -> dict[str, Any]:
    """Everything a refusal must leave as it was (audit of the refusal itself aside)."""
    return {
        "proposals": sorted(Proposal.objects.values_list("id", flat=True)),
        "approvals": sorted(ApprovalRequest.objects.values_list("id", "state")),
        "decisions": sorted(Decision.objects.values_list("id", "outcome")),
        "permits": sorted(Permit.objects.values_list("id", "state")),
        "operations": sorted(Operation.objects.values_list("id", "state", "attempts_made")),
        "resources": sorted(Resource.objects.values_list("id", "current_revision", "state")),
        "revisions": sorted(Revision.objects.values_list("id", flat=True)),
        "grants": sorted(Grant.objects.values_list("id", "revoked_at")),
        "budget": sorted(BudgetCounter.objects.filter(used__gt=0).values_list("key", "used")),
        "audit": sorted(AuditEvent.objects.exclude(kind__in=["dispatch.denied", "intake.denied"])
                        .values_list("id", flat=True)),
    }


def dispatch(world: World, proposal: Any, *, principal: Any = None, permit_id: Any = None,
             now: datetime | None = None) -> Operation:
    return proposal_dispatch(principal=principal or world.owner, proposal_id=proposal.id,
                             permit_id=permit_id, now=now or world.now, enqueue=False)


def decide(world: World, proposal: Any, decision: str = "grant", *, approver: Any = None,
           digest: Any = None, now: datetime | None = None) -> Any:
    return approval_decide(approver=approver or world.approver,
                           approval_id=proposal.approval.id, decision=decision,
                           digest=proposal.digest if digest is None else digest,
                           now=now or world.now)


def email_arguments(resource: Any, revision: int | None = None) -> dict[str, Any]:
    return {"draft": {"id": resource.id, "revision": revision or resource.current_revision}}


def propose_lookup(world: World, *, principal: Any = None, execution_id: str | None = None,
                   now: datetime | None = None) -> Proposal:
    return proposal_create(principal=principal or world.owner, operation="crm.lookup",
                           arguments={"customer_id": "cus-001"}, execution_id=execution_id,
                           now=now or world.now)


def edit(world: World, resource: Any, subject: str = "Edited subject") -> Resource:
    edited, _ = revision_create(principal=world.owner, resource_id=resource.id,
                                base_revision=resource.current_revision,
                                payload={**PAYLOAD, "subject": subject}, now=world.now)
    return edited


def state_of(resource: Any) -> str:
    return Resource.objects.get(id=resource.id).state


def grant_of(principal: Any, operation: str) -> Grant:
    return next(g for g in Grant.objects.filter(subject=principal)
                if operation in g.operations)


def without_id(denial: Denial) -> dict[str, Any]:
    body = denial.as_body()
    details = {k: v for k, v in body["error"]["details"].items() if k != "id"}
    return {"error": {**body["error"], "details": details}}


def budget_used() -> dict[str, int]:
    return dict(BudgetCounter.objects.values_list("key", "used"))
