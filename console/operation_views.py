"""Console views of operations: the admin's unknown outcomes and their resolve, one operation's
page with its attempts (and, for admins, its timeline), the request for a renewed approval of a
further attempt (decided on its own page, `console.renewal_views`), and the cancellation of a
claimed operation by an operator or admin. Thin, as `console.views`: reads through
`dispatch.selectors`, writes through `dispatch.services`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console import paging
from console.actions import action_view
from console.forms import CancelForm, ResolveForm
from console.outcomes import SETTLED, lookup_verdict, resolution_banner
from console.paging import page_link, pager
from console.presenters import (
    cancellation_outcome,
    parse_snapshot,
    pretty_json,
    snapshot_summary,
)
from console.roles import is_htmx, page, role_required
from console.sections import section_of_operation
from dispatch.selectors import operations
from dispatch.selectors.approvals import approval_for_proposal
from dispatch.selectors.outcomes import how_to_check, renewal_latest, renewal_pending
from dispatch.services.authority import has_role
from dispatch.services.cancellation import operation_cancel as operation_cancel_service
from dispatch.services.reconciliation import operation_resolve as operation_resolve_service
from dispatch.services.renewals import operation_reauthorize as operation_reauthorize_service
from dispatch.services.renewals import renewal_decider_refusal, renewal_refusal
from protocols.denials import Denial
from protocols.lifecycle import OperationState
from protocols.roles import Role

if TYPE_CHECKING:
    from dispatch.models import Operation, Principal


# --- unknown outcomes and timelines (admin) -----------------------------------------------------


@require_GET
@role_required(Role.ADMIN)
def operation_list_unknown(request: HttpRequest, principal: Principal) -> HttpResponse:
    listing = operations.operation_list_unknown(
        viewer=principal, after=paging.decode_time_id(request.GET.get("after")),
        before=paging.decode_time_id(request.GET.get("before")))
    rows = []
    for op in listing.rows:
        snapshot = parse_snapshot(op.proposal.canonical)
        rows.append({"operation": op, "form": ResolveForm(),
                     "summary": snapshot_summary(snapshot, limit=4),
                     "destination": snapshot.get("destination"),
                     "verdict": lookup_verdict(op.lookup_found)})
    return page(request, "console/operation_unknown_list.html", {
        "rows": rows,
        "count": operations.operation_count_unknown(viewer=principal),
        "older": page_link(request, "after", listing.older),
        "newer": page_link(request, "before", listing.newer),
    }, principal=principal)


#: The states the operations list filters by, in lifecycle order.
STATES = tuple(state.value for state in OperationState)
OPERATIONS_PAGE = 25
#: How often a running operation's page asks whether it moved on.
WATCH_SECONDS = 2


@require_GET
@role_required(Role.OPERATOR)
def operation_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The tenant's operations, newest first, narrowed to one state by `?state=`."""
    state = request.GET.get("state", "")
    if state not in STATES:
        state = ""
    listing = operations.operation_list(
        viewer=principal, state=state, limit=OPERATIONS_PAGE,
        after=paging.decode_time_id(request.GET.get("after")),
        before=paging.decode_time_id(request.GET.get("before")))
    return page(request, "console/operation_list.html", {
        "operations": listing.rows,
        "state": state,
        "states": STATES, **pager(request, listing),
    }, principal=principal)


@require_GET
@role_required(Role.OPERATOR)
def operation_detail(
    request: HttpRequest, principal: Principal, operation_id: str,
) -> HttpResponse:
    operation = operations.operation_get(viewer=principal, operation_id=operation_id)
    # The page asks again while the operation runs (`watch_token`): nothing while unchanged.
    if is_htmx(request) and request.GET.get("seen") == _watch_token(operation):
        return HttpResponse(status=204)
    return _operation_page(request, principal, operation, ResolveForm())


def _watch_token(operation: Operation) -> str:
    """What a running operation's page shows of its course: state, attempts, cancellation."""
    cancelled = operation.proposal.cancelled_at
    stamp = cancelled.timestamp() if cancelled else 0
    return f"{operation.state}.{operation.attempts_made}.{stamp}"


def _judgement(result: object) -> dict[str, object] | None:
    """A result that records a judgement (an attestation's `"result": "pass" | "fail"`, with
    its findings), for the page to say in words; None for any other result."""
    if isinstance(result, dict) and isinstance(result.get("attestation"), dict):
        result = result["attestation"]  # evidence.attest records the attestation it made
    if not isinstance(result, dict) or result.get("result") not in ("pass", "fail"):
        return None
    findings = result.get("findings")
    return {"result": result["result"], "validator": result.get("validator"),
            "policy": result.get("policy"),
            "findings": [f for f in findings if isinstance(f, dict)]
            if isinstance(findings, list) else []}


@require_POST
@role_required(Role.ADMIN)
def operation_resolve(
    request: HttpRequest, principal: Principal, operation_id: str,
) -> HttpResponse:
    """Settle an unknown outcome with a note of the evidence (`operation_resolve`)."""
    operation = operations.operation_get(viewer=principal, operation_id=operation_id)
    form = ResolveForm(request.POST)
    if not form.is_valid():
        return _operation_page(request, principal, operation, form, status=400)
    try:
        resolved = operation_resolve_service(
            admin=principal, operation_id=operation.id, outcome=form.cleaned_data["outcome"],
            evidence=form.cleaned_data["evidence"], now=timezone.now())
    except Denial as denial:
        operation = operations.operation_get(viewer=principal, operation_id=operation.id)
        return _operation_page(request, principal, operation, form, denial=denial,
                               status=denial.status)
    withdrawn = renewal_latest(viewer=principal, operation=resolved)
    messages.success(request, resolution_banner(
        resolved.state, resolved.id,
        withdrawn.attempt if withdrawn is not None and withdrawn.state == "revoked" else None))
    return redirect("console:operation-unknown-list")


@require_POST
@role_required(Role.ADMIN)
def operation_reauthorize(
    request: HttpRequest, principal: Principal, operation_id: str,
) -> HttpResponse:
    """Ask for a renewed approval of the operation's next attempt (`operation_reauthorize`)."""
    operation = operations.operation_get(viewer=principal, operation_id=operation_id)
    reason = request.POST.get("reason", "").strip()[:2000]
    try:
        renewal = operation_reauthorize_service(actor=principal, operation_id=operation.id,
                                                reason=reason, now=timezone.now())
    except Denial as denial:
        return _operation_page(request, principal, operation, ResolveForm(), denial=denial,
                               status=denial.status)
    messages.success(request, f"Renewal {renewal.id} asks another operator to approve attempt "
                              f"{renewal.attempt} of this operation, under the same key.")
    return redirect("console:operation-detail", operation_id=operation.id)


@require_POST
@role_required(Role.OPERATOR)
def operation_cancel(
    request: HttpRequest, principal: Principal, operation_id: str,
) -> HttpResponse:
    """Cancel a claimed operation (`operation_cancel`): with no attempt open it ends at once;
    an attempt in flight is asked to stop. The page it returns to says which."""
    operation = operations.operation_get(viewer=principal, operation_id=operation_id)
    form = CancelForm(request.POST)
    if not form.is_valid():
        return _operation_page(request, principal, operation, ResolveForm(), status=400,
                               cancel_form=form)
    try:
        cancelled = operation_cancel_service(actor=principal, operation_id=operation.id,
                                             reason=form.cleaned_data["reason"],
                                             now=timezone.now())
    except Denial as denial:
        messages.error(request, f"Not cancelled: {denial.message}")
    else:
        messages.success(request, cancellation_outcome(cancelled.id, cancelled.state,
                                                       cancelled.attempts_made))
    return redirect("console:operation-detail", operation_id=operation.id)


def _operation_page(
    request: HttpRequest, principal: Principal, operation: Operation, form: ResolveForm,
    *, denial: Denial | None = None, status: int = 200,
    cancel_form: CancelForm | None = None,
) -> HttpResponse:
    # The timeline is the audit's, and the audit is the admins' (operators see the rest).
    events = (operations.operation_timeline(viewer=principal, operation=operation)
              if has_role(principal, Role.ADMIN) else [])
    snapshot = parse_snapshot(operation.proposal.canonical)
    action = action_view(operation.operation, operation.proposal.contract_fingerprint, snapshot)
    pending = renewal_pending(viewer=principal, operation=operation)
    now = timezone.now()
    return page(request, "console/operation_detail.html", {
        "headline": action.headline,
        "message_views": action.messages,
        "live": operation.state not in SETTLED,
        "watch_token": _watch_token(operation),
        "watch_seconds": WATCH_SECONDS,
        "judgement": _judgement(operation.result),
        "section": section_of_operation(operation.state, admin=has_role(principal, Role.ADMIN)),
        "renewal": pending,
        "last_renewal": None if pending is not None
        else renewal_latest(viewer=principal, operation=operation),
        "renewal_expired": pending is not None and now >= pending.expires_at,
        "may_decide_renewal": pending is not None
        and renewal_decider_refusal(principal, pending) is None,
        "renewal_refusal": None if pending is not None else renewal_refusal(operation, now),
        "operation": operation,
        "fields": action.fields,
        "destination": snapshot.get("destination"),
        "verdict": lookup_verdict(operation.lookup_found),
        "how_to_check": how_to_check(operation),
        "approval": approval_for_proposal(viewer=principal,
                                          proposal_id=operation.proposal_id),
        "events": [{"event": e, "details": pretty_json(e.details)} for e in events],
        "result": pretty_json(operation.result) if operation.result is not None else "",
        "form": form,
        "denial": denial,
        "cancel_form": cancel_form or CancelForm(),
        "cancel_requested": operation.proposal.cancelled_at,
    }, principal=principal, status=status)
