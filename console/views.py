"""Console views: thin. They read through `dispatch.selectors`, write through
`dispatch.services`, and show every refusal a service raises as its message on the page; what an
approval's page shows is `console.approval_page`'s."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from console import paging, votes
from console.approval_page import detail_context, follow_context, watch_token
from console.changes import change_views
from console.forms import (
    CancelForm,
    DecisionForm,
    QueueFilterForm,
)
from console.headlines import action_headline
from console.paging import pager
from console.presenters import (
    cancellation_outcome,
    duration,
    parse_snapshot,
)
from console.renewal_queue import queue_renewals
from console.roles import is_htmx, page, refused, role_required
from dispatch.selectors.approvals import (
    approval_count_pending,
    approval_get,
    approval_list_expiring,
    approval_list_pending,
    decision_list,
)
from dispatch.selectors.contracts import (
    contract_for_fingerprint,
    operation_names,
)
from dispatch.selectors.operations import operation_for_proposal
from dispatch.selectors.principals import principal_list
from dispatch.services.approvals import approval_decide as approval_decide_service
from dispatch.services.cancellation import proposal_cancel as proposal_cancel_service
from protocols.approvals import effective_approval_state
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState
from protocols.roles import Role

if TYPE_CHECKING:
    from dispatch.models import ApprovalRequest, Principal

POLL_SECONDS = 5
# The queue marks a request whose window closes within this.
EXPIRING_SOON = timedelta(minutes=5)
DECIDED_PAGE = 25


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """`CSRF_FAILURE_VIEW`: a form posted without its token is refused, in the console's look."""
    return refused(request, status=403, title="Form refused",
                   message="The form was sent without a valid CSRF token, so nothing was "
                           "done. Reload the page and submit it again.")


# --- the queue ----------------------------------------------------------------------------------


@require_GET
@role_required(Role.OPERATOR)
def approval_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Pending approvals of the viewer's tenant, newest first; htmx polls the fragment."""
    now = timezone.now()
    agents = principal_list(viewer=principal, kind="agent")
    form = QueueFilterForm(request.GET or None,
                           operations=operation_names(approval_only=True),
                           principals=[(p.id, p.name) for p in agents])
    filters = form.filters(now)
    expiring = request.GET.get("sort") == "expiring"
    listing = approval_list_expiring if expiring else approval_list_pending
    queue = listing(
        viewer=principal, filters=filters,
        after=paging.decode_time_id(request.GET.get("after")),
        before=paging.decode_time_id(request.GET.get("before")),
    )
    # Your pending count: not what you approved toward a quorum, which waits for others.
    count = approval_count_pending(viewer=principal, filters=filters, awaiting_viewer=True)
    listed = approval_count_pending(viewer=principal, filters=filters)
    total = approval_count_pending(viewer=principal, awaiting_viewer=True) \
        if form.active else count
    changed = change_views(principal, [approval.proposal for approval in queue.rows])
    tallies = votes.queue_tallies(principal, queue.rows)
    rows = [{**_queue_row(approval, now), "change": changed.get(approval.proposal_id),
             "votes": tallies.get(approval.id)} for approval in queue.rows]
    context = {
        "form": form, "rows": rows, "count": count, "total": total, "now": now,
        "voted": listed.value - count.value,
        "renewals": queue_renewals(principal, now),
        **pager(request, queue),
        "poll_seconds": POLL_SECONDS,
        "expiring": expiring,
        "sort_newest": _sorted_link(request, None),
        "sort_expiring": _sorted_link(request, "expiring"),
    }
    template = "console/_approval_queue.html" if is_htmx(request) else \
        "console/approval_list.html"
    response = page(request, template, context, principal=principal)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _queue_row(approval: ApprovalRequest, now: datetime) -> dict[str, Any]:
    proposal = approval.proposal
    snapshot = parse_snapshot(proposal.canonical)
    contract = contract_for_fingerprint(proposal.contract_fingerprint)
    return {
        "approval": approval,
        "proposal": proposal,
        "headline": action_headline(proposal.operation, contract, snapshot.get("arguments", {})),
        "age": duration(now - approval.created_at),
        "time_left": duration(approval.expires_at - now),
        "soon": approval.expires_at - now < EXPIRING_SOON,
        "lapsed": effective_approval_state(approval.state, approval.expires_at, now)
        is ApprovalState.EXPIRED,
    }


def _sorted_link(request: HttpRequest, sort: str | None) -> str:
    """The queue with its filters, sorted another way, from its first page."""
    params = request.GET.copy()
    for name in ("after", "before", "sort"):
        params.pop(name, None)
    if sort:
        params["sort"] = sort
    query = params.urlencode()
    return f"{request.path}?{query}" if query else request.path


# --- decided -----------------------------------------------------------------------------------


@require_GET
@role_required(Role.OPERATOR)
def decided_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The tenant's decisions, newest first, whoever made them, with what each led to."""
    listing = decision_list(
        viewer=principal, limit=DECIDED_PAGE, after=paging.decode_time_id(request.GET.get("after")),
        before=paging.decode_time_id(request.GET.get("before")))
    rows = []
    for decision in listing.rows:
        proposal = decision.approval.proposal
        snapshot = parse_snapshot(proposal.canonical)
        contract = contract_for_fingerprint(proposal.contract_fingerprint)
        rows.append({
            "decision": decision, "approval": decision.approval, "proposal": proposal,
            "headline": action_headline(proposal.operation, contract,
                                        snapshot.get("arguments", {})),
            "operation": getattr(proposal, "operation_record", None),
        })
    return page(request, "console/decided_list.html", {
        "rows": rows, **pager(request, listing), "waiting": votes.votes_waiting(principal),
    }, principal=principal)


@require_GET
@role_required(Role.OPERATOR)
def approval_follow(
    request: HttpRequest, principal: Principal, approval_id: str,
) -> HttpResponse:
    """The fragment of a decided approval's page that follows what its permit led to; htmx
    asks for it again every `FOLLOW_SECONDS` until the operation settles."""
    approval = approval_get(viewer=principal, approval_id=approval_id)
    state = effective_approval_state(approval.state, approval.expires_at, timezone.now())
    # Out of band: the title's state and the fields' heading move on with the operation, and
    # Cancel goes once it is claimed.
    return page(request, "console/_follow.html",
                {**follow_context(principal, approval), "state": state.value, "oob": True},
                principal=principal)


# --- one approval -------------------------------------------------------------------------------


@require_GET
@role_required(Role.OPERATOR)
def approval_detail(
    request: HttpRequest, principal: Principal, approval_id: str,
) -> HttpResponse:
    approval = approval_get(viewer=principal, approval_id=approval_id)
    form = DecisionForm(initial={"digest": approval.proposal.digest})
    return _detail_page(request, principal, approval, form)


@require_POST
@role_required(Role.OPERATOR)
def approval_decide(
    request: HttpRequest, principal: Principal, approval_id: str,
) -> HttpResponse:
    """Grant or deny through the approval resolver, confirming the digest the page showed."""
    approval = approval_get(viewer=principal, approval_id=approval_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, principal, approval, form, status=400)
    data = form.cleaned_data
    try:
        decided, permit = approval_decide_service(
            approver=principal, approval_id=approval.id, decision=data["decision"],
            digest=data["digest"], reason=data["reason"], now=timezone.now())
    except Denial as denial:
        if denial.code is DenialCode.NOT_FOUND:
            raise  # the console's one not-found page (role_required)
        # Show the current state (decided, expired) beside the refusal.
        approval = approval_get(viewer=principal, approval_id=approval.id)
        return _detail_page(request, principal, approval, form, denial=denial,
                            status=denial.status)
    if permit is not None:
        messages.success(request, f"Approved. Permit {permit.id} is bound to this exact "
                                  f"snapshot until {permit.expires_at:%Y-%m-%d %H:%M:%S} UTC.")
    elif (tallied := votes.tally_view(principal, decided)) and tallied.pending:
        messages.info(request, votes.vote_recorded(tallied), extra_tags="alert-vote")
    else:
        # Not the green of an approval: a denial reads differently at a glance.
        messages.info(request, "Denied. The action will not run.", extra_tags="alert-denied")
        newer = _newer_approval(principal, decided, request.POST.get("then", ""))
        if newer:
            messages.info(request, f"{decided.id} was denied as superseded: this is the "
                                   f"proposal of the revision now current.")
            return redirect("console:approval-detail", approval_id=newer)
    return redirect("console:approval-detail", approval_id=decided.id)


def _newer_approval(principal: Principal, approval: ApprovalRequest, wanted: str) -> str | None:
    """`wanted` when it is the pending approval of the revision that made `approval`'s
    proposal stale (the one-click denial goes on to it); None for anything else."""
    if not wanted:
        return None
    change = change_views(principal, [approval.proposal]).get(approval.proposal_id)
    newer = {m.newer_approval_id for m in change.moved} if change else set()
    return wanted if wanted in newer else None


@require_POST
@role_required(Role.OPERATOR)
def approval_cancel(
    request: HttpRequest, principal: Principal, approval_id: str,
) -> HttpResponse:
    """Cancel the approval's action (`proposal_cancel`): before its claim the approval and its
    permit are revoked; a claim that got there first is cancelled as the operation's page
    does. The page it returns to says which."""
    approval = approval_get(viewer=principal, approval_id=approval_id)
    form = CancelForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, principal, approval,
                            DecisionForm(initial={"digest": approval.proposal.digest}),
                            status=400, cancel_form=form)
    try:
        proposal = proposal_cancel_service(actor=principal, proposal_id=approval.proposal_id,
                                           reason=form.cleaned_data["reason"],
                                           now=timezone.now())
    except Denial as denial:
        messages.error(request, f"Not cancelled: {denial.message}")
    else:
        operation = operation_for_proposal(viewer=principal, proposal_id=proposal.id)
        messages.success(request, cancellation_outcome(
            operation.id if operation else None, operation.state if operation else None,
            operation.attempts_made if operation else 0))
    return redirect("console:approval-detail", approval_id=approval.id)


@require_GET
@role_required(Role.OPERATOR)
def approval_watch(
    request: HttpRequest, principal: Principal, approval_id: str,
) -> HttpResponse:
    """What an open approval page asks every `WATCH_SECONDS`: nothing (204, htmx keeps the
    page) while the approval reads as the page shows it (`?seen=`, its `watch_token`); else
    the decision column anew, so that a colleague's decision, a vote or the expiry replaces
    live Approve and Deny without a reload, and the state in the title with it."""
    approval = approval_get(viewer=principal, approval_id=approval_id)
    # The token first: an unchanged approval (most asks) costs no page's worth of reads.
    state = effective_approval_state(approval.state, approval.expires_at, timezone.now())
    if request.GET.get("seen") == watch_token(state, votes.tally_view(principal, approval)):
        return HttpResponse(status=204)
    context = detail_context(principal, approval,
                             DecisionForm(initial={"digest": approval.proposal.digest}))
    return page(request, "console/_decision_swap.html", context, principal=principal)


def _detail_page(
    request: HttpRequest, principal: Principal, approval: ApprovalRequest, form: DecisionForm,
    *, denial: Denial | None = None, status: int = 200, cancel_form: CancelForm | None = None,
) -> HttpResponse:
    context = detail_context(principal, approval, form, denial=denial, cancel_form=cancel_form)
    return page(request, "console/approval_detail.html", context, principal=principal,
                status=status)
