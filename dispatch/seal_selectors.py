"""Reads of the sealed audit for the console (docs/audit-seal.md)."""

from __future__ import annotations

from collections.abc import Iterable

from dispatch.models import AuditEvent, AuditSeal, Principal


def seal_blocks(*, viewer: Principal, events: Iterable[AuditEvent]) -> dict[int, int]:
    """Event id to the number of the block that seals it, for the viewer's tenant's events of
    the list given (unsealed events are absent). One query, however many events."""
    ids = [event.pk for event in events]
    if not ids:
        return {}
    return dict(AuditSeal.objects.filter(tenant_id=viewer.tenant_id, event_id__in=ids)
                .values_list("event_id", "block"))
