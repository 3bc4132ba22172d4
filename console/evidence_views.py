"""Console views of the evidence chain (docs/design.md#evidence): a question's page, with everything
that rests on it as one timeline. Thin, as `console.views`: reads through
`dispatch.selectors.evidence`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from console.roles import page, role_required
from dispatch.selectors.evidence import question_evidence_chain
from dispatch.services.authority import has_role
from protocols.approvals import effective_approval_state
from protocols.roles import Role

if TYPE_CHECKING:
    from datetime import datetime

    from dispatch.models import Principal
    from dispatch.selectors.evidence import ChainEvent


@require_GET
@role_required(Role.OPERATOR)
def question_detail(request: HttpRequest, principal: Principal, question_id: str) -> HttpResponse:
    """The question and its evidence chain, oldest first: to the tenant's operators and
    admins; any other id is the one not-found page."""
    chain = question_evidence_chain(viewer=principal, question_id=question_id)
    payload = chain.revision.payload if chain.revision is not None else {}
    kinds = [event.kind for event in chain.events]
    now = timezone.now()
    return page(request, "console/question_detail.html", {
        "chain": chain,
        "question": chain.question,
        "topic": payload.get("topic", "") if isinstance(payload, dict) else "",
        "text": payload.get("text", "") if isinstance(payload, dict) else "",
        "events": [_row(event, principal, now) for event in chain.events],
        "counts": {
            "receipts": kinds.count("receipt.issued"),
            "reports": len(chain.reports),
            "attestations": kinds.count("attestation.issued"),
            "publications": kinds.count("publication.proposed"),
        },
    }, principal=principal)


def _row(event: ChainEvent, principal: Principal, now: datetime) -> dict[str, Any]:
    """A timeline entry, with what the viewer may open from it: a publication's approval page
    to those holding the approval's role (the page itself checks again)."""
    row: dict[str, Any] = {"event": event, "record": event.record}
    if event.kind == "publication.proposed":
        approval = getattr(event.record, "approval", None)
        row["approval"] = approval
        row["approval_state"] = effective_approval_state(
            approval.state, approval.expires_at, now).value if approval is not None else ""
        row["may_open"] = approval is not None and has_role(principal, approval.role)
        refs = event.record.resource_refs or [{}]
        row["report_revision"] = refs[0].get("revision")
        row["attestation_id"] = (event.record.arguments or {}).get("attestation", "")
    return row
