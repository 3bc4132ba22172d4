"""Who may see the console: the one gate every console view passes through.

A visitor who is not logged in is sent to the login page (an htmx poll is told to redirect the
whole page instead of swapping the login form into a fragment). A logged-in user without a
human principal, an agent's user, and a human without the required role get the 403 page.
An admin holds every right of an operator (docs/design.md#principals).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.sections import section_of_view
from dispatch.models import Principal
from dispatch.observability.context import bind_ids
from dispatch.selectors.pauses import pauses_in_force
from dispatch.services.authority import has_role
from dispatch.services.principals import principal_for_user
from protocols.denials import Denial, DenialCode
from protocols.roles import Role

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, Principal, P], HttpResponse]

ROLE_LABELS = {Role.OPERATOR: "an operator", Role.ADMIN: "an admin"}


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def page(
    request: HttpRequest, template: str, context: dict[str, Any], *,
    principal: Principal | None, status: int = 200,
) -> HttpResponse:
    """Render a console page with the viewer's identity for the header and navigation, its
    section (console.sections) unless the view names one, and the pauses in force in the
    viewer's tenant for the banner every page shows (docs/design.md#approval-policies)."""
    match = request.resolver_match
    context = {
        "principal": principal,
        "is_admin": principal is not None and has_role(principal, Role.ADMIN),
        "section": section_of_view(match.url_name if match else None),
        # The tenant comes with the principal: its count of pauses costs no query.
        "pauses": pauses_in_force(tenant_id=principal.tenant_id)
        if principal is not None and principal.tenant.pauses and not is_htmx(request) else [],
        **context,
    }
    return render(request, template, context, status=status)


def refused(
    request: HttpRequest, *, title: str, message: str, status: int,
    principal: Principal | None = None,
) -> HttpResponse:
    return page(request, "console/refused.html", {"title": title, "message": message,
                                                  "status": status},
                principal=principal, status=status)


def not_found_page(request: HttpRequest, principal: Principal, denial: Denial) -> HttpResponse:
    return refused(request, status=404, title="Not found", message=denial.message,
                   principal=principal)


def role_required(role: Role) -> Callable[[View[P]], Callable[..., HttpResponse]]:
    """Let the view run only for a logged-in human of `role` (or an admin); it receives the
    principal as its second argument. A record the view loads that does not exist or that the
    viewer may not see (the loaders' one `not_found`, `dispatch.services.access`) is the
    console's one not-found page: the views load without catching it."""

    def decorate(view: View[P]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                if is_htmx(request):
                    return HttpResponse(status=204, headers={"HX-Redirect": settings.LOGIN_URL})
                return redirect_to_login(request.get_full_path())
            principal = principal_for_user(request.user)
            if principal is not None:  # on the request's log lines (docs/design.md#logs)
                bind_ids(tenant=principal.tenant_id, principal=principal.id)
            if principal is None or not has_role(principal, role):
                needed = ROLE_LABELS[role]
                return refused(
                    request, status=403, title="Not allowed",
                    message=f"This page is for {needed} of the tenant. Your account does not "
                            "hold that role; ask an admin if you need it.",
                    # The header's navigation only for someone who can use some of it.
                    principal=principal if principal and has_role(principal, Role.OPERATOR)
                    else None)
            try:
                return view(request, principal, *args, **kwargs)
            except Denial as denial:
                if denial.code is not DenialCode.NOT_FOUND:
                    raise
                return not_found_page(request, principal, denial)

        return wrapper

    return decorate
