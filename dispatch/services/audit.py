"""Audit events, appended in the caller's transaction, secrets redacted (DESIGN §4).

An append is one fixed INSERT (no model instance, no query compilation): it rides in every
write transaction of the hot path, so it costs what the database costs. Values go through the
model fields' own preparation, so a row written here reads back exactly like an ORM row.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from dispatch.models import AuditEvent
from protocols.redaction import redact

_COLUMNS = ("tenant_id", "at", "kind", "actor", "operation_id", "proposal_id", "digest",
            "details")


@functools.cache
def _insert_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    table = quote(AuditEvent._meta.db_table)
    columns = ", ".join(quote(AuditEvent._meta.get_field(c).column) for c in _COLUMNS)
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(_COLUMNS))})"  # noqa: S608 - quoted identifiers only


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
    meta = AuditEvent._meta
    values = (tenant_id, meta.get_field("at").get_db_prep_save(at, connection), kind, actor,
              operation_id, proposal_id, digest,
              meta.get_field("details").get_db_prep_save(
                  redact(details or {}, settings.AUDIT_REDACT_FIELDS), connection))
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(connection.vendor), values)
