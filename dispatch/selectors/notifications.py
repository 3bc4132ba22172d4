"""What the console reads of notifications (docs/design.md#notifications): the tenant's delivery
log, newest first, each with its attempts. Read-only; tenant-scoped like every selector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Prefetch

from dispatch.models import Notification, NotificationAttempt, Principal
from dispatch.selectors.paging import Page, keyset

#: The states the delivery log filters by.
STATES = tuple(state.value for state in Notification.State)


def notification_log(
    *, viewer: Principal, state: str = "", after: Sequence[Any] | None = None,
    before: Sequence[Any] | None = None, limit: int = 50,
) -> Page[Notification]:
    """The viewer's tenant's notifications, newest first, keyset-paged, with their attempts
    (oldest first) in one more query."""
    queryset = Notification.objects.filter(tenant_id=viewer.tenant_id).prefetch_related(
        Prefetch("attempt_log", queryset=NotificationAttempt.objects.order_by("number")))
    if state in STATES:
        queryset = queryset.filter(state=state)
    return keyset(queryset, keys=("created_at", "id"), after=after, before=before,
                  limit=limit)
