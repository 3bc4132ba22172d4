"""The console's sections: the item the navigation marks as current and the first link of a
page's breadcrumb are one value, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocols.lifecycle import OperationState


@dataclass(frozen=True)
class Section:
    key: str
    label: str
    url_name: str


APPROVALS: Final = Section("approvals", "Approvals", "console:approval-list")
DECIDED: Final = Section("decided", "Decided", "console:decided-list")
OPERATIONS: Final = Section("operations", "Operations", "console:operation-list")
UNKNOWN_OUTCOMES: Final = Section("unknown", "Unknown outcomes", "console:operation-unknown-list")
GRANTS: Final = Section("grants", "Grants", "console:grant-list")
AUDIT: Final = Section("audit", "Audit", "console:audit-list")
NOTIFICATIONS: Final = Section("notifications", "Notifications", "console:notification-list")
PAUSES: Final = Section("pauses", "Pauses", "console:pause-list")

#: The section of each console view (by URL name); an operation's page decides by the operation.
BY_VIEW: Final = {
    "approval-list": APPROVALS,
    "approval-detail": APPROVALS,
    "approval-decide": APPROVALS,
    "approval-cancel": APPROVALS,
    "approval-follow": APPROVALS,
    "approval-watch": APPROVALS,
    "decided-list": DECIDED,
    "operation-list": OPERATIONS,
    "question-detail": APPROVALS,
    "operation-unknown-list": UNKNOWN_OUTCOMES,
    "grant-list": GRANTS,
    "grant-issue": GRANTS,
    "grant-revoke": GRANTS,
    "audit-list": AUDIT,
    "audit-verify": AUDIT,
    "notification-list": NOTIFICATIONS,
    "pause-list": PAUSES,
    "pause-create": PAUSES,
    "pause-resume": PAUSES,
}


def section_of_view(url_name: str | None) -> Section | None:
    return BY_VIEW.get(url_name or "")


def section_of_operation(state: str, *, admin: bool) -> Section:
    """An operation is in Operations; for an admin, an unknown one is in the unknown outcomes,
    where it waits to be resolved."""
    if admin and state == OperationState.UNKNOWN:
        return UNKNOWN_OUTCOMES
    return OPERATIONS
