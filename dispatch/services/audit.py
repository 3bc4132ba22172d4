"""Audit events, appended in the caller's transaction, secrets redacted (DESIGN §4).

An append is one fixed INSERT (no model instance, no query compilation): it rides in every
write transaction of the hot path, so it costs what the database costs. `audit_values` gives a
move function the same row to append inside its own statement (a PostgreSQL CTE).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

from dispatch.models import AuditEvent
from dispatch.services.statements import run, value
from protocols.redaction import redact

#: The audit table's columns, in the order `audit_values` gives them.
AUDIT_COLUMNS = ('"tenant_id", "at", "kind", "actor", "operation_id", "proposal_id", '
                 '"digest", "details"')
AUDIT_PLACEHOLDERS = "%s, %s, %s, %s, %s, %s, %s, %s"
AUDIT_INSERT = f'INSERT INTO "dispatch_auditevent" ({AUDIT_COLUMNS}) VALUES ({AUDIT_PLACEHOLDERS})'


def audit_values(
    *, tenant_id: str, kind: str, actor: str, at: datetime, operation_id: str = "",
    proposal_id: str = "", digest: str = "", details: dict[str, Any] | None = None,
) -> tuple[Any, ...]:
    """One event's column values, prepared for the database, secrets redacted."""
    return (tenant_id, value(AuditEvent, "at", at), kind, actor, operation_id, proposal_id,
            digest, value(AuditEvent, "details",
                          redact(details or {}, settings.AUDIT_REDACT_FIELDS)))


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
    run(AUDIT_INSERT, audit_values(tenant_id=tenant_id, kind=kind, actor=actor, at=at,
                              operation_id=operation_id, proposal_id=proposal_id,
                              digest=digest, details=details))
