"""Console views of renewed approvals (docs/design.md#renewals): the renewals an operator may
decide, heading the queue; one renewal's decision page; and its decision. Who may decide is the
renewal service's rule: an operator of the contract's approval role (an admin holds every role)
who neither asked for it nor runs the operation. Thin, as `console.views`."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console.actions import action_view
from console.forms import DecisionForm
from console.outcomes import lookup_verdict
from console.presenters import duration, parse_snapshot, pretty_json
from console.roles import page, role_required
from console.sections import APPROVALS
from dispatch.models import Principal, Renewal
from dispatch.selectors.operations import operation_get
from dispatch.selectors.outcomes import (
    how_to_check,
    renewal_get_for_review,
    renewal_withdrawn_resolution,
)
from dispatch.services.renewals import renewal_decide as renewal_decide_service
from dispatch.services.renewals import renewal_decider_refusal
from protocols.denials import Denial
from protocols.roles import Role


@require_GET
@role_required(Role.OPERATOR)
def renewal_detail(request: HttpRequest, principal: Principal, renewal_id: str) -> HttpResponse:
    renewal = renewal_get_for_review(viewer=principal, renewal_id=renewal_id)
    return _renewal_page(request, principal, renewal, DecisionForm(
        initial={"digest": renewal.digest}))


@require_POST
@role_required(Role.OPERATOR)
def renewal_decide(request: HttpRequest, principal: Principal, renewal_id: str) -> HttpResponse:
    """Grant or deny a renewed approval, confirming the digest the page showed."""
    renewal = renewal_get_for_review(viewer=principal, renewal_id=renewal_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _renewal_page(request, principal, renewal, form, status=400)
    data = form.cleaned_data
    try:
        decided = renewal_decide_service(
            approver=principal, renewal_id=renewal.id, decision=data["decision"],
            digest=data["digest"], reason=data["reason"], now=timezone.now())
    except Denial as denial:
        renewal = renewal_get_for_review(viewer=principal, renewal_id=renewal.id)
        return _renewal_page(request, principal, renewal, form, denial=denial,
                             status=denial.status)
    if decided.state == "granted":
        messages.success(request, f"Approved. Attempt {decided.attempt} of operation "
                                  f"{decided.operation_id} is queued under the same key.")
    else:
        messages.info(request, f"Denied. Attempt {decided.attempt} will not run; the "
                               "operation stays unknown for an admin to resolve.",
                      extra_tags="alert-denied")
    return redirect("console:renewal-detail", renewal_id=decided.id)


def _renewal_page(
    request: HttpRequest, principal: Principal, renewal: Renewal, form: DecisionForm, *,
    denial: Denial | None = None, status: int = 200,
) -> HttpResponse:
    operation = operation_get(viewer=principal, operation_id=renewal.operation_id)
    snapshot = parse_snapshot(operation.proposal.canonical)
    action = action_view(operation.operation, operation.proposal.contract_fingerprint, snapshot)
    now = timezone.now()
    refusal = renewal_decider_refusal(principal, renewal)
    live = renewal.state == "pending" and now < renewal.expires_at
    return page(request, "console/renewal_detail.html", {
        "section": APPROVALS,
        "renewal": renewal,
        "operation": operation,
        "headline": action.headline,
        "message_views": action.messages,
        "fields": action.fields,
        "destination": snapshot.get("destination"),
        "canonical": pretty_json(snapshot),
        "verdict": lookup_verdict(operation.lookup_found),
        "how_to_check": how_to_check(operation),
        "lapsed": renewal.state == "pending" and not live,
        "may_decide": live and refusal is None,
        "refusal": refusal,
        "resolved_as": renewal_withdrawn_resolution(renewal),
        "form": form,
        "denial": denial,
        "time_left": duration(renewal.expires_at - now),
    }, principal=principal, status=status)
