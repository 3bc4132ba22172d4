"""The delivery log of notifications, for admins (docs/design.md#notifications): every email and
webhook the console sent or tries to send, its state and each attempt's answer. It shows where a
message went and what came back; never a secret (a notification holds none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from console import paging
from console.paging import pager
from console.roles import page, role_required
from dispatch.selectors.notifications import STATES, notification_log
from protocols.roles import Role

if TYPE_CHECKING:
    from dispatch.models import Principal

LOG_PAGE = 50


@require_GET
@role_required(Role.ADMIN)
def notification_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    state = request.GET.get("state", "")
    if state not in STATES:
        state = ""
    listing = notification_log(
        viewer=principal, state=state, limit=LOG_PAGE,
        after=paging.decode_time_id(request.GET.get("after")),
        before=paging.decode_time_id(request.GET.get("before")))
    return page(request, "console/notification_list.html", {
        "notifications": listing.rows, "state": state, "states": STATES,
        **pager(request, listing),
    }, principal=principal)
