"""Audit events, appended in the caller's transaction, secrets redacted (DESIGN §4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

from dispatch.models import AuditEvent
from protocols.redaction import redact


def audit_record(
    *,
    tenant_id: str,
    kind: str,
    actor: str,
    at: datetime,
    operation_id: str = "",
    proposal_id: str = "",
    digest: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Append one event. Call inside the transaction of the change it records."""
    AuditEvent.objects.create(
        tenant_id=tenant_id,
        kind=kind,
        actor=actor,
        at=at,
        operation_id=operation_id,
        proposal_id=proposal_id,
        digest=digest,
        details=redact(details or {}, settings.AUDIT_REDACT_FIELDS),
    )
