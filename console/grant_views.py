"""The grants page (admin): the tree of grants and delegations, issue and revoke."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console.forms import GrantIssueForm
from console.roles import page, role_required
from dispatch.models import Principal
from dispatch.selectors.contracts import operation_authority_keys
from dispatch.selectors.principals import grant_tree, principal_get, principal_list
from dispatch.services.authority import grant_issue as grant_issue_service
from dispatch.services.authority import grant_revoke as grant_revoke_service
from protocols.roles import Role


def _grant_form(principal: Principal, data: Any = None, *, now: datetime) -> GrantIssueForm:
    subjects = principal_list(viewer=principal)
    return GrantIssueForm(data, principals=[(p.id, f"{p.name} ({p.kind})") for p in subjects],
                          authority_keys=operation_authority_keys(), now=now)


def _grants_page(
    request: HttpRequest, principal: Principal, form: GrantIssueForm, status: int = 200,
) -> HttpResponse:
    return page(request, "console/grant_list.html", {
        "tree": grant_tree(viewer=principal), "form": form, "now": timezone.now(),
    }, principal=principal, status=status)


@require_GET
@role_required(Role.ADMIN)
def grant_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return _grants_page(request, principal, _grant_form(principal, now=timezone.now()))


@require_POST
@role_required(Role.ADMIN)
def grant_issue(request: HttpRequest, principal: Principal) -> HttpResponse:
    now = timezone.now()
    form = _grant_form(principal, request.POST, now=now)
    if not form.is_valid():
        return _grants_page(request, principal, form, status=400)
    data = form.cleaned_data
    subject = principal_get(viewer=principal, principal_id=data["subject"])
    grant = grant_issue_service(issuer=principal, subject=subject,
                                operations=data["operations"], scope=data["scope"],
                                now=now, expires_in=data["expires_in"])
    messages.success(request, f"Issued {grant.id} to {subject.name}.")
    return redirect("console:grant-list")


@require_POST
@role_required(Role.ADMIN)
def grant_revoke(request: HttpRequest, principal: Principal, grant_id: str) -> HttpResponse:
    grant = grant_revoke_service(actor=principal, grant_id=grant_id, now=timezone.now())
    messages.success(request, f"Revoked {grant.id} and every grant delegated from it.")
    return redirect("console:grant-list")
