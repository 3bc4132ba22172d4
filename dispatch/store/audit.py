"""The audit table's one insert (docs/design.md#audit): a row of prepared values, appended by the
statement here or, inside a one-round-trip statement (a PostgreSQL CTE), by `insert_if`.

The values are named `audit_<column>` so that a statement that writes an audit row beside its own
parameters never confuses the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatch.models import AuditEvent
from dispatch.store.sql import statement, value, write
from protocols.jsontypes import JSONObject

_COLUMNS = ("tenant_id", "at", "kind", "actor", "operation_id", "proposal_id", "digest",
            "details")
COLUMNS = ", ".join(f'"{column}"' for column in _COLUMNS)
VALUES = ", ".join(f"%(audit_{column})s" for column in _COLUMNS)
INSERT = statement("audit.insert",
                   f'INSERT INTO "dispatch_auditevent" ({COLUMNS}) VALUES ({VALUES})')


@dataclass(frozen=True)
class AuditRow:
    """One event's values, prepared for the database (`row`); its details already redacted."""

    params: dict[str, Any]


def row(*, tenant_id: str, kind: str, actor: str, at: datetime, operation_id: str = "",
        proposal_id: str = "", digest: str = "", details: JSONObject) -> AuditRow:
    return AuditRow({
        "audit_tenant_id": tenant_id, "audit_at": value(AuditEvent, "at", at),
        "audit_kind": kind, "audit_actor": actor, "audit_operation_id": operation_id,
        "audit_proposal_id": proposal_id, "audit_digest": digest,
        "audit_details": value(AuditEvent, "details", details)})


def append(audit: AuditRow) -> None:
    """Append one event in the caller's transaction (inside `pipelined`, without waiting)."""
    write(INSERT, audit.params)


def insert_if(after: str) -> str:
    """The insert as a part of a CTE: written only where the part named `after` changed a row."""
    return (f'INSERT INTO "dispatch_auditevent" ({COLUMNS}) SELECT {VALUES} '
            f"WHERE EXISTS (SELECT 1 FROM {after}) RETURNING 1")
