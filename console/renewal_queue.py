"""The renewed approvals heading an operator's queue (docs/design.md#renewals): each pending
renewal the viewer may decide, by the renewal service's own rule, with a link to its page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from console.actions import action_view
from console.presenters import duration, parse_snapshot
from dispatch.models import Principal
from dispatch.selectors.outcomes import renewal_list_decidable


def queue_renewals(principal: Principal, now: datetime) -> list[dict[str, Any]]:
    """The queue's renewals: each pending renewal the viewer may decide, as a row."""
    rows = []
    for renewal in renewal_list_decidable(viewer=principal):
        operation = renewal.operation
        rows.append({
            "renewal": renewal, "operation": operation,
            "headline": action_view(operation.operation, operation.proposal.contract_fingerprint,
                                    parse_snapshot(operation.proposal.canonical)).headline,
            "age": duration(now - renewal.created_at),
            "time_left": duration(renewal.expires_at - now),
            "lapsed": now >= renewal.expires_at,
        })
    return rows
