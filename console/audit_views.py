"""The audit, for admins, as a person reads it (docs/design.md#console): each event with the
action it is about (its operation's name and summary sentence), its details as labelled fields,
its time in local time and UTC, and links to the approval and the operation.

Thin, like `console.views`: it reads through `dispatch.selectors.audit` and
`dispatch.selectors.seals`; the page's proposals come in one query, whatever it holds. Its Verify
action runs the sealed audit's verification for the admin's tenant (`verify_tenant`, what
`manage.py audit_verify` runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods

from console import paging
from console.audit_presenters import DetailField, detail_fields, kind_title
from console.forms import AuditFilterForm
from console.headlines import action_headline
from console.paging import pager
from console.presenters import Headline, parse_snapshot
from console.roles import page, role_required
from dispatch.selectors import audit, seals
from dispatch.selectors.contracts import contract_for_fingerprint
from dispatch.services.seals import verify_tenant
from protocols.roles import Role

if TYPE_CHECKING:
    from dispatch.models import AuditEvent, Principal, Proposal

AUDIT_PAGE = 50


@dataclass(frozen=True)
class AuditRow:
    """One event as the page shows it. `operation` is the action's name, `headline` its
    sentence (None when the event names no proposal the tenant holds); `approval_id` and
    `operation_id` are what the row links to, where the record has them."""

    event: AuditEvent
    title: str
    operation: str
    headline: Headline | None
    approval_id: str
    operation_id: str
    fields: list[DetailField]
    #: The number of the block that seals the event, None while it is not yet sealed.
    block: int | None = None


@require_GET
@role_required(Role.ADMIN)
def audit_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = AuditFilterForm(request.GET or None, kinds=audit.audit_kinds(viewer=principal))
    listing = audit.audit_list(
        viewer=principal, filters=form.filters(), limit=AUDIT_PAGE,
        after=paging.decode_int(request.GET.get("after")),
        before=paging.decode_int(request.GET.get("before")))
    proposals = audit.audit_proposals(viewer=principal, events=listing.rows)
    headlines = {pid: _proposal_headline(proposal) for pid, proposal in proposals.items()}
    blocks = seals.seal_blocks(viewer=principal, events=listing.rows)
    rows = [_row(event, proposals.get(event.proposal_id), headlines.get(event.proposal_id),
                 blocks.get(event.pk))
            for event in listing.rows]
    return page(request, "console/audit_list.html", {
        "form": form, "rows": rows, **pager(request, listing),
    }, principal=principal)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def audit_verify(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The page's Verify action: what `manage.py audit_verify --tenant T` says of the admin's
    tenant (docs/audit-seal.md#verification), as a message on the audit page. The address
    opened in a browser (GET) is the audit page, where the button is: nothing verified."""
    if request.method != "POST":
        return redirect("console:audit-list")
    problem = verify_tenant(principal.tenant_id)
    if problem is None:
        messages.success(request, "The audit chain verifies: every sealed event and block is "
                                  "as it was signed.")
    else:
        messages.error(request, f"The audit chain does not verify: {problem}.")
    return redirect("console:audit-list")


def _proposal_headline(proposal: Proposal) -> Headline:
    """The proposal's summary sentence, as the queue and the approval page show it."""
    contract = contract_for_fingerprint(proposal.contract_fingerprint)
    arguments = parse_snapshot(proposal.canonical).get("arguments", {})
    return action_headline(proposal.operation, contract, arguments)


def _row(event: AuditEvent, proposal: Proposal | None, headline: Headline | None,
         block: int | None) -> AuditRow:
    approval = getattr(proposal, "approval", None) if proposal is not None else None
    operation = getattr(proposal, "operation_record", None) if proposal is not None else None
    name = proposal.operation if proposal is not None else ""
    if not name and isinstance(event.details, dict):
        # An event whose proposal is gone or never was (a refused dispatch) may still name it.
        named = event.details.get("operation")
        name = named if isinstance(named, str) else ""
    return AuditRow(
        event=event, title=kind_title(event.kind), operation=name, headline=headline,
        approval_id=approval.id if approval is not None else "",
        operation_id=event.operation_id or (operation.id if operation is not None else ""),
        fields=detail_fields(event.details), block=block)
