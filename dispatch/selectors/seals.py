"""Reads of the sealed audit for the console (docs/audit-seal.md)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from dispatch.models import AuditCheckpoint, AuditEvent, AuditSeal, Principal


def seal_blocks(*, viewer: Principal, events: Iterable[AuditEvent]) -> dict[int, int]:
    """Event id to the number of the block that seals it, for the viewer's tenant's events of
    the list given (unsealed events are absent). One query, however many events."""
    ids = [event.pk for event in events]
    if not ids:
        return {}
    return dict(AuditSeal.objects.filter(tenant_id=viewer.tenant_id, event_id__in=ids)
                .values_list("event_id", "block"))


def checkpoints_of_tenant(viewer: Principal) -> QuerySet[AuditCheckpoint]:
    """The signed checkpoints the sealer published for the viewer's tenant only; callers check
    the admin role first."""
    return AuditCheckpoint.objects.filter(tenant_id=viewer.tenant_id)
